package relaytest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSkipLogged: a skip is noted in $OUTBOX_TEST_SKIP_LOG with the test's
// name and reason, one line each.
func TestSkipLogged(t *testing.T) {
	log := filepath.Join(t.TempDir(), "skips")
	t.Setenv(SkipLogEnv, log)
	t.Run("old", func(t *testing.T) { Skip(t, "needs Postgres %d or later", 17) })
	t.Run("older", func(t *testing.T) { Skip(t, "two\nlines") })
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if want := "TestSkipLogged/old\tneeds Postgres 17 or later\nTestSkipLogged/older\ttwo lines\n"; string(got) != want {
		t.Errorf("skip log %q, want %q", got, want)
	}
}

// TestEverySkipIsLogged: no test of the module skips except through Skip,
// so that CI's skip log misses none (.ci/run fails a step on a skip it
// does not expect).
func TestEverySkipIsLogged(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || path == filepath.Join(root, "internal/lab/relaytest/skip.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "Skip", "Skipf", "SkipNow":
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "relaytest" {
					return true
				}
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: %s skips without relaytest.Skip: CI would not see it", rel, fset.Position(call.Pos()).Line, sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files under %s: not the module", files, root)
	}
}
