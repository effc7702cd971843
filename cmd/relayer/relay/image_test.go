package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// imageScriptPath is the script that builds the relay's image, relative to
// this package's directory.
const imageScriptPath = "../../../scripts/image"

// imageTestEnv set to 1 builds the image in TestImageBuildsAndRuns: it
// takes a minute or two and needs buildah, so it is not part of every run.
const imageTestEnv = "RELAYER_TEST_IMAGE"

// imageUser is the user the image runs as: unprivileged, and no user of a
// distribution's (65532 is the "nonroot" of distroless images).
const imageUser = "65532:65532"

// The image script keeps its promises without being run: a static binary
// built from this command, an image from scratch holding the binary and
// the CA certificates only (no shell, nothing run inside a container while
// building), a non-root user, the binary as entrypoint, and the version
// label read from the binary's --version, whose first line this test holds
// to the script's reading of it.
func TestImageScriptInvariants(t *testing.T) {
	t.Parallel()
	info, err := os.Stat(imageScriptPath)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable: %v", imageScriptPath, info.Mode())
	}
	if out, err := exec.Command("bash", "-n", imageScriptPath).CombinedOutput(); err != nil {
		t.Errorf("bash -n %s: %v\n%s", imageScriptPath, err, out)
	}
	script := readDoc(t, imageScriptPath)
	code := withoutComments(strings.Split(script, "\n"))
	for _, want := range []string{
		"set -euo pipefail",
		"CGO_ENABLED=0",
		"(cd cmd/relayer && CGO_ENABLED=0 GOOS=linux go build -trimpath -o \"$work/relayer\" ./relay)",
		"buildah from scratch",
		"user=" + imageUser + "\n",
		`--user "$user"`,
		"binary=/usr/local/bin/relayer\n",
		`--entrypoint "[\"$binary\"]"`,
		`info=$("$work/relayer" --version)`,
		`"org.opencontainers.image.version=$version"`,
		`buildah copy --chmod 0555 "$ctr" "$work/relayer" "$binary"`,
		`buildah copy --chmod 0444 "$ctr" "$certs" /etc/ssl/certs/ca-certificates.crt`,
		"--format oci",
	} {
		if !strings.Contains(code, want) {
			t.Errorf("%s lacks %q", imageScriptPath, want)
		}
	}
	// Only the binary and the certificates go in: those two copies, no
	// shell, and no `buildah run`, which would need one.
	if n := strings.Count(code, "buildah copy"); n != 2 {
		t.Errorf("%s copies %d things into the image, want the binary and the certificates", imageScriptPath, n)
	}
	for _, never := range []string{"buildah run", "/bin/sh", "busybox", "--user 0", "--user root"} {
		if strings.Contains(code, never) {
			t.Errorf("%s has %q", imageScriptPath, never)
		}
	}
	// The script's own lines that read the version and the commit from
	// --version's output get what the binary prints.
	var reading []string
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "version=$(") || strings.HasPrefix(line, "revision=$(") {
			reading = append(reading, line)
		}
	}
	if len(reading) != 2 {
		t.Fatalf("%s: found %d lines reading version= and revision=, want 2", imageScriptPath, len(reading))
	}
	for _, v := range []command.BuildVersion{
		{Command: "v1.4.0", Library: "v1.4.0", Go: "go1.26.8", Commit: "0123abcd", Modified: true},
		{Command: "v1.4.1-0.20260105100000-0123abcd", Library: "(devel)", Go: "go1.26.8", Commit: "0123abcd"},
		{Command: "(devel)", Library: "(devel)", Go: "go1.26.8"},
	} {
		read := "info=$1\n" + strings.Join(reading, "\n") + "\necho \"$version|$revision\"\n"
		out, err := exec.Command("bash", "-c", read, "bash", v.String()).Output()
		if want := v.Command + "|" + v.Commit + "\n"; err != nil || string(out) != want {
			t.Errorf("the script reads %q from --version's %q (%v), want %q", out, v.String(), err, want)
		}
	}
}

// With RELAYER_TEST_IMAGE=1, scripts/image builds the image and writes it
// as an OCI archive, which this test reads without a container runtime:
// the config runs the binary as the non-root user, its version label is
// what the binary prints, the only files are the binary and the
// certificates, and the binary, taken out of the layer, runs here
// (migrate --check against this test's database).
func TestImageBuildsAndRuns(t *testing.T) {
	if os.Getenv(imageTestEnv) != "1" {
		t.Skipf("set %s=1 to build the image with scripts/image (buildah; a minute or two)", imageTestEnv)
	}
	if _, err := exec.LookPath("buildah"); err != nil {
		t.Fatalf("%s=1 but buildah is not installed: %v", imageTestEnv, err)
	}
	dir := t.TempDir()
	archive := filepath.Join(dir, "relayer.tar")
	tag := "localhost/relayer-test:" + strings.ToLower(strings.TrimPrefix(testdb.NewSchema(t), "t_"))
	cmd := exec.Command(imageScriptPath, "--tag", tag, "--archive", archive)
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() { _ = exec.Command("buildah", "rmi", tag).Run() })
	if err != nil {
		t.Fatalf("scripts/image: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); lines[len(lines)-1] != tag {
		t.Errorf("scripts/image printed %q last, want the image's name %s", lines[len(lines)-1], tag)
	}

	img := readOCIArchive(t, archive)
	cfg := img.config.Config
	if cfg.User != imageUser || !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/relayer"}) {
		t.Errorf("the image runs %v as %q; want /usr/local/bin/relayer as %s", cfg.Entrypoint, cfg.User, imageUser)
	}
	var files []string
	for name := range img.files {
		files = append(files, name)
	}
	slices.Sort(files)
	if want := []string{"etc/ssl/certs/ca-certificates.crt", "usr/local/bin/relayer"}; !slices.Equal(files, want) {
		t.Errorf("the image's files are %v, want only %v", files, want)
	}

	bin := filepath.Join(dir, "relayer")
	if err := os.WriteFile(bin, img.files["usr/local/bin/relayer"], 0o755); err != nil {
		t.Fatal(err)
	}
	version, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("the image's binary --version: %v", err)
	}
	first, _, _ := strings.Cut(string(version), "\n")
	if f := strings.Fields(first); len(f) < 2 || cfg.Labels["org.opencontainers.image.version"] != f[1] {
		t.Errorf("label org.opencontainers.image.version %q; the binary prints %q", cfg.Labels["org.opencontainers.image.version"], first)
	}
	dbURL, schema := testdb.URL(t), testdb.NewSchema(t)
	db := testdb.Open(t, "pgx")
	if _, err := store.Migrate(t.Context(), db, store.Tables{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	check := exec.Command(bin, "migrate", "--check", "--schema", schema)
	check.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(out), "is up to date") {
		t.Errorf("the image's binary, migrate --check on a migrated outbox: %v\n%s", err, out)
	}
}

// ociImage is what TestImageBuildsAndRuns reads of an OCI archive: the
// image's config and its files (regular files of every layer, by path).
type ociImage struct {
	config struct {
		Config struct {
			User       string
			Entrypoint []string
			Labels     map[string]string
		} `json:"config"`
	}
	files map[string][]byte
}

// readOCIArchive reads the one image of the OCI archive at path.
func readOCIArchive(t *testing.T, path string) ociImage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{} // the archive's files by name
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			blobs[strings.TrimPrefix(h.Name, "./")] = b
		}
	}
	blob := func(digest string) []byte {
		t.Helper()
		b, ok := blobs["blobs/"+strings.Replace(digest, ":", "/", 1)]
		if !ok {
			t.Fatalf("%s: no blob %s", path, digest)
		}
		return b
	}
	type descriptor struct{ Digest string }
	var index struct{ Manifests []descriptor }
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("%s: index.json: %v, %d manifests", path, err, len(index.Manifests))
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	var img ociImage
	if err := json.Unmarshal(blob(manifest.Config.Digest), &img.config); err != nil {
		t.Fatal(err)
	}
	img.files = map[string][]byte{}
	for _, l := range manifest.Layers {
		var r io.Reader = bytes.NewReader(blob(l.Digest))
		br := bufio.NewReader(r)
		if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
			gz, err := gzip.NewReader(br)
			if err != nil {
				t.Fatal(err)
			}
			r = gz
		} else {
			r = br
		}
		lt := tar.NewReader(r)
		for {
			h, err := lt.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag != tar.TypeDir {
				b, err := io.ReadAll(lt)
				if err != nil {
					t.Fatal(err)
				}
				img.files[strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")] = b
			}
		}
	}
	return img
}
