// Command apicompat compares the exported API of the repository's
// published packages with the previous release's (package
// tests/apicompat tells how) and exits 1 when a stable package changed
// incompatibly without the changelog announcing it.
//
//	go run ./tests/cmd/apicompat [-root DIR] [-v]
//
// The test of tests/apicompat runs it, so that the type-checking runs
// without the race detector that the test command gives the tests.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/relayer-go/relayer/tests/apicompat"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	verbose := flag.Bool("v", false, "also list the incompatible changes allowed")
	flag.Parse()
	r, err := apicompat.Check(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicompat:", err)
		os.Exit(2)
	}
	fmt.Printf("compared %d packages of the previous release; %d incompatible changes allowed, %d unannounced\n",
		r.Packages, len(r.Allowed), len(r.Unannounced))
	if *verbose {
		for _, c := range r.Allowed {
			fmt.Println("\tallowed:", c)
		}
	}
	if len(r.Unannounced) > 0 {
		fmt.Fprintf(os.Stderr, "incompatible changes to stable packages that CHANGELOG.md does not announce:\n\t%s\n"+
			"Keep the old API, or announce each under \"## Unreleased\", \"### Changed\" or \"### Removed\", in a bullet "+
			"that names the package and, in a code span, the changed name (README, \"API stability\").\n",
			strings.Join(r.Unannounced, "\n\t"))
		os.Exit(1)
	}
}
