package main

import "testing"

// `run` is parsed with a CLI of its own (start-up time), except when it
// asks for help or the version: those must show the whole CLI's text.
func TestIsHelpFlag(t *testing.T) {
	for arg, want := range map[string]bool{
		"-h": true, "--help": true, "--help=true": true, "--help=1": true,
		"--version": true, "--version=true": true,
		"--pg-url=postgres://h/db": false, "--helpful": false, "help": false, "run": false,
	} {
		if got := isHelpFlag(arg); got != want {
			t.Errorf("isHelpFlag(%q) = %v, want %v", arg, got, want)
		}
	}
}
