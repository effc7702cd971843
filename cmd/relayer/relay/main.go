// Command relay is the deployable relayer: the relay (relayer run) and the
// operator commands of an outbox in PostgreSQL (schema, migrate, stats,
// lanes, dead, parked, held, console, version), without the demo and the
// benchmark of the development command in the directory above, and so
// without the embedded NATS server, the PostgreSQL installer and the
// benchmark harness they bring. scripts/image builds it into the container
// image as /usr/local/bin/relayer; build it so for a host of your own:
//
//	cd cmd/relayer && CGO_ENABLED=0 go build -trimpath -o relayer ./relay
//
// Its commands, flags and exit statuses are those of the development
// command's; see docs/relay.md for the relay.
package main

import (
	"github.com/relayer-go/relayer/cmd/relayer/internal/cli"
	"github.com/relayer-go/relayer/cmd/relayer/internal/relay"
)

func main() { cli.Main(cli.Commands(relay.Command)) }
