package main

import (
	"fmt"
	"os"
)

func runDev(args []string) int {
	fmt.Fprintln(os.Stderr, "etlctl dev: not available yet")
	return 1
}
