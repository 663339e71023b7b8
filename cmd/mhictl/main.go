// Command mhictl is the mhistack tool box: it runs the emulated modem and,
// as subcommands are added, inspects and drives modems.
//
//	mhictl sim serve -profile qcom-sdx55m -socket /run/modem.sock
//	mhictl help
//	mhictl sim serve --help
//
// Each subcommand lives in its own file and registers itself with
// register; it parses its own flags (newFlagSet gives it --help and the
// usage text). Exit status: 0 success, 1 failure, 2 usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand: Name is its words ("sim serve"), Short its
// one-line description (mhictl help), Summary the full one (--help), Run
// gets the arguments after them and where to write (logs and usage go to
// stderr).
type command struct {
	Name    string
	Short   string
	Summary string
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]*command{}

// register adds a subcommand; called from the init of its file.
func register(c *command) {
	if _, dup := commands[c.Name]; dup {
		panic("mhictl: duplicate command " + c.Name)
	}
	commands[c.Name] = c
}

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// newFlagSet returns a flag set for c that reports errors instead of
// exiting, and prints "usage: mhictl NAME ARGS" with the summary and the
// flags for -h/--help.
func newFlagSet(c *command, args string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("mhictl "+c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: mhictl %s %s\n\n%s\n\nFlags:\n", c.Name, args, c.Summary)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args into fs and turns flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}

// parseNoArgs is parse for a command that takes no positional arguments,
// followed by the checks of its flags (deviceFlags.check …) in order.
func parseNoArgs(fs *flag.FlagSet, args []string, checks ...func() error) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to the command with the longest matching name.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		listCommands(stderr, "")
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, _ := lookup(args[1:]); c != nil {
				return report(c.Run(ctx, []string{"--help"}, stdout, stdout), stderr)
			}
		}
		listCommands(stdout, "")
		return 0
	}
	c, rest := lookup(args)
	if c == nil {
		prefix := strings.Join(args[:1], " ")
		if hasPrefix(prefix) {
			fmt.Fprintf(stderr, "mhictl: %q needs a subcommand\n", prefix)
			listCommands(stderr, prefix)
		} else {
			fmt.Fprintf(stderr, "mhictl: unknown command %q (mhictl help lists them)\n", args[0])
		}
		return 2
	}
	return report(c.Run(ctx, rest, stdout, stderr), stderr)
}

// report turns a command's error into an exit status.
func report(err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "mhictl: %v (see --help)\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "mhictl: %v\n", err)
	return 1
}

// lookup returns the command whose name is the longest prefix of args,
// and the arguments after it.
func lookup(args []string) (*command, []string) {
	for n := len(args); n > 0; n-- {
		if c, ok := commands[strings.Join(args[:n], " ")]; ok {
			return c, args[n:]
		}
	}
	return nil, nil
}

func hasPrefix(prefix string) bool {
	for name := range commands {
		if strings.HasPrefix(name, prefix+" ") {
			return true
		}
	}
	return false
}

// listCommands prints the commands (those under prefix, if given).
func listCommands(w io.Writer, prefix string) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		if prefix == "" || strings.HasPrefix(n, prefix+" ") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	fmt.Fprintf(w, "usage: mhictl COMMAND [flags]   (mhictl COMMAND --help for its flags)\n\nCommands:\n")
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].Short)
	}
}
