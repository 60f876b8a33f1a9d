// Command debpkgs prints the Debian packages of hostprog's table, one a line: the list
// `make deps` installs; with -crates, the crates.io packages `make bench-deps`
// installs instead.
package main

import (
	"flag"
	"fmt"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

func main() {
	crates := flag.Bool("crates", false, "print the crates.io packages instead")
	flag.Parse()
	pkgs := hostprog.Packages()
	if *crates {
		pkgs = hostprog.Crates()
	}
	for _, pkg := range pkgs {
		fmt.Println(pkg)
	}
}
