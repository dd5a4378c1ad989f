package main

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEShowsThisProgram keeps the README's example and this file equal,
// so the README never shows code that does not compile.
func TestREADMEShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i := strings.Index(s, "```go\npackage main")
	if i < 0 {
		t.Fatal("README has no Go program block")
	}
	block := s[i+len("```go\n"):]
	block = block[:strings.Index(block, "```")]
	// main.go has a package comment the README leaves out.
	body := string(src)[strings.Index(string(src), "package main"):]
	if block != body {
		t.Fatal("README's program and examples/readme/main.go differ; update one from the other")
	}
}

func TestProgramRuns(t *testing.T) {
	main() // panics on any error
}
