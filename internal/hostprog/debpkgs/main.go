// Command debpkgs prints the Debian packages of hostprog's table, one a line: the list
// `make deps` installs.
package main

import (
	"fmt"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

func main() {
	for _, pkg := range hostprog.Packages() {
		fmt.Println(pkg)
	}
}
