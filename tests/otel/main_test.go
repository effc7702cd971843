package relayerotel_test

import (
	"testing"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
