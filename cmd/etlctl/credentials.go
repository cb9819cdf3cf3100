package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/mightyetl/mightyetl/internal/auth"
)

// runCredentials prints a credentials-file line for a principal whose
// password is read from standard input (one line; the trailing newline is
// not part of the password).
func runCredentials(args []string) int {
	if len(args) != 2 || args[0] != "hash" {
		fmt.Fprintln(os.Stderr, "usage: etlctl credentials hash <principal>   (password on standard input)")
		return 2
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(os.Stderr, "etlctl credentials: no password on standard input")
		return 2
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		fmt.Fprintln(os.Stderr, "etlctl credentials: empty password")
		return 2
	}
	out, err := auth.CredentialLine(args[1], []byte(password))
	if err != nil {
		fmt.Fprintf(os.Stderr, "etlctl credentials: %v\n", err)
		return 2
	}
	fmt.Println(out)
	return 0
}
