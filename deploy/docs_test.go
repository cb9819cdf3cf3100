package deploy_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// markdownLink matches the target of an inline Markdown link or image:
// [text](target) or [text](target "title").
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestDocsStandAlone: the repository's Markdown (README, CHANGELOG and
// everything under docs/ and deploy/) links only to files inside the
// repository that exist, so a reader of the repository alone can follow
// every link; no page cites the steering folder (../shared/) it once came
// from.
func TestDocsStandAlone(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var pages, links int
	check := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		rel, _ := filepath.Rel(root, path)
		text := string(b)
		if strings.Contains(text, "../shared/") || strings.Contains(text, "../../shared/") {
			t.Errorf("%s cites ../shared/, which is not in the repository; link to docs/ instead", rel)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
				continue
			}
			links++
			target, _, _ = strings.Cut(target, "#")
			abs := filepath.Clean(filepath.Join(filepath.Dir(path), target))
			if r, err := filepath.Rel(root, abs); err != nil || r == ".." || strings.HasPrefix(r, "../") {
				t.Errorf("%s links %q, outside the repository", rel, m[1])
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links %q, which does not exist", rel, m[1])
			}
		}
	}
	for _, f := range []string{"README.md", "CHANGELOG.md"} {
		check(filepath.Join(root, f))
	}
	for _, dir := range []string{"docs", "deploy"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".md") {
				check(path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if pages < 10 || links < 20 {
		t.Fatalf("read %d pages with %d relative links: the walk missed the docs", pages, links)
	}
}
