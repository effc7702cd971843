package apicompat

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/modfile"
	"golang.org/x/tools/go/packages"
)

// previousRelease is the commit of the last release, the API this one is
// held to. There are no tags yet, so it is pinned here, as in tests/mixed,
// and moved on at each release.
const previousRelease = "7b584083121f5fa78282e63c0e211bc22be06684"

// rootPath is the import path of the core module; every published
// package's path starts with it.
const rootPath = "github.com/relayer-go/relayer"

// libraries are the directories of the published library modules, whose
// exported API is compared; cmd/relayer is a command and has none. The
// check fails when go.work lists a module that is neither here nor one of
// nonLibraries, so that a new module is not left unchecked.
var libraries = []string{
	".", "enlist/bun", "enlist/gorm", "enlist/pgx", "enlist/sqlx",
	"otel", "transport/amqp", "transport/kafka", "transport/nats",
}

var nonLibraries = []string{"cmd/relayer", "tests"}

// stable are the packages, relative to rootPath, that README's "API
// stability" section promises to keep. An incompatible change to one of
// them fails the check unless the changelog announces it; changes to the
// other exported packages (the conformance kits, consume, pgxlisten) are
// only reported.
var stable = []string{
	"", "headers", "enlist", "enlist/bun", "enlist/gorm", "enlist/pgx", "enlist/sqlx",
	"dispatch", "inbox", "health", "otel", "store", "console",
	"transport/amqp", "transport/kafka", "transport/nats", "transport/memory",
}

// Report is what Check found: the incompatible changes it allowed
// (announced, or in a package not yet stable), each with why, and those
// that fail the check.
type Report struct {
	Packages    int      // packages of the previous release compared
	Allowed     []string // "path: change (why)"
	Unannounced []string // "path: change"
}

// Check compares the exported API of the published packages of the
// repository at root with the previous release's, with
// golang.org/x/exp/apidiff, and reports the incompatible changes. An
// incompatible change to a stable package is Unannounced unless
// CHANGELOG.md's "## Unreleased" section announces it (see announced). The
// error is for a check that could not run: a checkout without the previous
// release's commit, packages that do not type-check, a module list or
// README that disagrees with this package's lists.
func Check(root string) (Report, error) {
	var r Report
	root, err := filepath.Abs(root)
	if err != nil {
		return r, err
	}
	if err := checkModuleList(root); err != nil {
		return r, err
	}
	if err := checkStableListed(root); err != nil {
		return r, err
	}
	if err := checkSameRelease(filepath.Join(root, "tests", "mixed", "mixed_test.go")); err != nil {
		return r, err
	}
	old, err := os.MkdirTemp("", "relayer-previous-release-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(old)
	if err := extractCommit(root, previousRelease, old); err != nil {
		return r, err
	}
	oldPkgs, err := loadAPI(old)
	if err != nil {
		return r, err
	}
	newPkgs, err := loadAPI(root)
	if err != nil {
		return r, err
	}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return r, err
	}
	bullets := unreleasedBreakingBullets(string(changelog))

	r.Packages = len(oldPkgs)
	for _, rel := range slices.Sorted(maps.Keys(oldPkgs)) {
		var changes []change
		if np, ok := newPkgs[rel]; ok {
			for _, c := range apidiff.Changes(oldPkgs[rel], np).Changes {
				if !c.Compatible {
					changes = append(changes, change{pkg: rel, name: oldPkgs[rel].Name(), message: c.Message})
				}
			}
		} else {
			changes = append(changes, change{pkg: rel, name: oldPkgs[rel].Name(), message: "package removed", removedPackage: true})
		}
		for _, c := range changes {
			switch {
			case !slices.Contains(stable, rel):
				r.Allowed = append(r.Allowed, c.String()+" (not a stable package)")
			case announced(c, bullets):
				r.Allowed = append(r.Allowed, c.String()+" (announced)")
			default:
				r.Unannounced = append(r.Unannounced, c.String())
			}
		}
	}
	return r, nil
}

// change is one incompatible change apidiff reported for a package.
type change struct {
	pkg            string // relative to rootPath; "" is the root package
	name           string // the package's name, such as relayernats
	message        string // apidiff's, such as "(*Store).Renew: removed"
	removedPackage bool
}

func (c change) String() string {
	return importPath(c.pkg) + ": " + c.message
}

// ident returns the identifier an announcement must name: the last name of
// apidiff's object, the member for a method or field ("Renew" of
// "(*Store).Renew"), the package's last element for a removed package.
func (c change) ident() string {
	if c.removedPackage {
		return path.Base(importPath(c.pkg))
	}
	obj, _, _ := strings.Cut(c.message, ":")
	obj = strings.NewReplacer("(", "", ")", "", "*", "").Replace(obj)
	return obj[strings.LastIndex(obj, ".")+1:]
}

// announced reports whether a bullet of the changelog's "### Changed" or
// "### Removed" under "## Unreleased" announces c: it names c's package
// (its import path's last element, its name as users import it, such as
// relayernats, or its path in the repository, such as transport/nats) and
// holds a code span in which c's name stands as a whole identifier.
func announced(c change, bullets []string) bool {
	for _, b := range bullets {
		if namesPackage(b, c) && codeSpanNames(b, c.ident()) {
			return true
		}
	}
	return false
}

func namesPackage(bullet string, c change) bool {
	for _, w := range []string{c.name, path.Base(importPath(c.pkg)), c.pkg} {
		if w == "" {
			continue
		}
		if containsWord(bullet, w) {
			return true
		}
	}
	return false
}

// codeSpanNames reports whether a code span of bullet names name: holds it
// as a whole identifier, or holds a group of names written with an
// ellipsis, "…Default" for every name that ends in Default and "Load…" for
// every name that starts with Load.
func codeSpanNames(bullet, name string) bool {
	parts := strings.Split(bullet, "`")
	for i := 1; i < len(parts); i += 2 {
		span := parts[i]
		if containsWord(span, name) {
			return true
		}
		for _, f := range strings.FieldsFunc(span, func(r rune) bool {
			return r != '…' && (r > 127 || !identByte(byte(r)))
		}) {
			suffix, isSuffix := strings.CutPrefix(f, "…")
			prefix, isPrefix := strings.CutSuffix(f, "…")
			switch {
			case isSuffix && suffix != "" && !strings.Contains(suffix, "…") && strings.HasSuffix(name, suffix):
				return true
			case isPrefix && prefix != "" && !strings.Contains(prefix, "…") && strings.HasPrefix(name, prefix):
				return true
			}
		}
	}
	return false
}

// containsWord reports whether s holds w with no letter, digit or
// underscore on either side.
func containsWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(w)
		if (start == 0 || !identByte(s[start-1])) && (end == len(s) || !identByte(s[end])) {
			return true
		}
		i = start + 1
	}
}

func identByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// unreleasedBreakingBullets returns the bullets, each joined onto one line,
// of "### Changed" and "### Removed" under "## Unreleased".
func unreleasedBreakingBullets(changelog string) []string {
	var bullets []string
	var section, sub string
	var cur *strings.Builder
	flush := func() {
		if cur != nil {
			bullets = append(bullets, cur.String())
			cur = nil
		}
	}
	for line := range strings.Lines(changelog) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "## "):
			flush()
			section, sub = strings.TrimSpace(line[3:]), ""
			continue
		case strings.HasPrefix(line, "### "):
			flush()
			sub = strings.TrimSpace(line[4:])
			continue
		}
		if section != "Unreleased" || (sub != "Changed" && sub != "Removed") {
			continue
		}
		switch {
		case strings.HasPrefix(line, "- "):
			flush()
			cur = new(strings.Builder)
			cur.WriteString(line[2:])
		case cur != nil && strings.TrimSpace(line) != "":
			cur.WriteString(" " + strings.TrimSpace(line))
		case cur != nil:
			flush()
		}
	}
	flush()
	return bullets
}

// checkModuleList fails when go.work uses a module that libraries and
// nonLibraries do not name.
func checkModuleList(root string) error {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return err
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return err
	}
	for _, u := range work.Use {
		dir := filepath.ToSlash(filepath.Clean(u.Path))
		if !slices.Contains(libraries, dir) && !slices.Contains(nonLibraries, dir) {
			return fmt.Errorf("go.work uses %s, which the API check neither compares nor names as a module without an API", dir)
		}
	}
	return nil
}

// checkStableListed fails when README's "API stability" section does not
// name, in a code span, each package the test holds stable: the list here
// and the promise there are one.
func checkStableListed(root string) error {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return err
	}
	_, section, ok := strings.Cut(string(readme), "\n## API stability\n")
	if !ok {
		return errors.New(`README.md has no "## API stability" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, rel := range stable {
		name := rel
		if name == "" {
			name = "relayer"
		}
		if !codeSpanNames(section, name) {
			return fmt.Errorf("README's API stability section does not name %s, which the API check holds stable", name)
		}
	}
	return nil
}

// checkSameRelease fails when tests/mixed runs against another previous
// release than this test compares with: both move together at a release.
func checkSameRelease(mixed string) error {
	src, err := os.ReadFile(mixed)
	if err != nil {
		return err
	}
	if !bytes.Contains(src, []byte(`previousRelease = "`+previousRelease+`"`)) {
		return fmt.Errorf("%s pins another previousRelease than the API check's %s: move both at a release", mixed, previousRelease)
	}
	return nil
}

// extractCommit writes the tree of commit into dir, through git archive.
// A checkout without that commit (a shallow clone) fails the test: the
// check is not to be skipped unnoticed.
func extractCommit(root, commit, dir string) error {
	var stderr bytes.Buffer
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("the previous release's source (commit %s) cannot be read from this checkout's history: %v: %s"+
			"a shallow clone lacks it: fetch the whole history (git fetch --unshallow)", commit, err, stderr.String())
	}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(name, data, 0o644)
			}
		}
		if err != nil {
			return err
		}
	}
}

// loadAPI type-checks the exported packages of the library modules of the
// tree at dir, through a workspace of those modules alone (so that the
// tests' and the command's requirements do not take part), and returns
// them by path relative to rootPath. Internal, main and testdata packages
// have no API to keep.
func loadAPI(dir string) (map[string]*types.Package, error) {
	data, err := os.ReadFile(filepath.Join(dir, "go.work"))
	if err != nil {
		return nil, err
	}
	orig, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	work := &modfile.WorkFile{Syntax: new(modfile.FileSyntax)}
	work.AddGoStmt(orig.Go.Version)
	for _, lib := range libraries {
		if _, err := os.Stat(filepath.Join(dir, lib, "go.mod")); err == nil {
			work.AddUse(filepath.Join(dir, lib), "")
		}
	}
	for _, r := range orig.Replace {
		work.AddReplace(r.Old.Path, r.Old.Version, r.New.Path, r.New.Version)
	}
	workDir, err := os.MkdirTemp("", "relayer-apicompat-work-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(workDir)
	workPath := filepath.Join(workDir, "go.work")
	if err := os.WriteFile(workPath, modfile.Format(work.Syntax), 0o644); err != nil {
		return nil, err
	}
	if sum, err := os.ReadFile(filepath.Join(dir, "go.work.sum")); err == nil {
		if err := os.WriteFile(workPath+".sum", sum, 0o644); err != nil {
			return nil, err
		}
	}
	cfg := &packages.Config{
		// From source, dependencies included: type-checking costs seconds
		// where export data would compile both trees first (three minutes
		// on a 2-core machine with an empty build cache).
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo |
			packages.NeedImports | packages.NeedDeps,
		Dir: dir,
		Env: append(os.Environ(), "GOWORK="+workPath, "GOFLAGS=-mod=readonly"),
	}
	pkgs, err := packages.Load(cfg, rootPath+"/...")
	if err != nil {
		return nil, fmt.Errorf("loading the packages of %s: %w", dir, err)
	}
	api := map[string]*types.Package{}
	var errs []string
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.PkgPath, rootPath), "/")
		if p.Name == "main" || hasElem(rel, "internal") || hasElem(rel, "testdata") {
			continue
		}
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
		api[rel] = p.Types
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("type-checking the packages of %s:\n\t%s", dir, strings.Join(errs, "\n\t"))
	}
	return api, nil
}

func hasElem(rel, elem string) bool {
	return slices.Contains(strings.Split(rel, "/"), elem)
}

func importPath(rel string) string {
	if rel == "" {
		return rootPath
	}
	return rootPath + "/" + rel
}
