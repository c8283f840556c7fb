package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"frontdoor/internal/suggest"
)

// newFlags is the flag set of subcommand name; synopsis ("serve --config
// FILE") heads its usage. Errors go to stderr.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: frontdoor %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags runs parse (fs.Parse, or a parser built on it). --help (or
// -h) prints the usage to stdout and says exit 0; a bad flag prints the
// error and the usage to fs's output and says exit 2. done is false when
// the command should go on.
func parseFlags(fs *flag.FlagSet, stdout io.Writer, parse func() error) (code int, done bool) {
	out := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := parse()
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = stdout.Write(buf.Bytes())
		return 0, true
	}
	_, _ = out.Write(buf.Bytes())
	if err != nil {
		return 2, true
	}
	return 0, false
}

// isHelp reports whether args ask for help and nothing else.
func isHelp(args []string) bool {
	return len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help")
}

// optionalFloat is a float flag that may be left unset: its usage line
// shows no default, and set says whether the flag was given.
type optionalFloat struct {
	v   float64
	set bool
}

func (o *optionalFloat) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatFloat(o.v, 'g', -1, 64)
}

func (o *optionalFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("not a number")
	}
	o.v, o.set = v, true
	return nil
}

// commands are frontdoor's subcommands, for the suggestion after a typo.
var commands = []string{"serve", "demo", "check-config", "healthcheck", "warm", "cache", "calibrate", "version", "help"}

// suggestCommand is the subcommand name is most likely a typo of (one it
// begins, or one a few edits away), "" when none is close.
func suggestCommand(name string) string {
	for _, c := range commands {
		if len(name) >= 2 && strings.HasPrefix(c, name) {
			return c
		}
	}
	return suggest.Nearest(name, commands)
}
