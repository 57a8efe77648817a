package configdrive_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	drive "github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/parts/configdrive"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// published is the core and its store as the builder reads them: one
// instance, app-1, this host's; other-1 another host's.
type published struct{ tree []byte }

var errOtherHost = errors.New("another host's instance")

func (published) OwnRecord(_ context.Context, op, name string) (store.Instance, error) {
	switch name {
	case "app-1":
		return store.Instance{Name: name, UUID: "5b1f0b5c-3f1a-4c47-9d64-0e0b4e1f5a11"}, nil
	case "other-1":
		return store.Instance{}, errors.Join(errors.New(op+" "+name), errOtherHost)
	}
	return store.Instance{}, store.ErrNotFound
}

func (p published) Document(_ context.Context, uuid string) (store.Document, error) {
	return store.Document{InstanceUUID: uuid, Tree: p.tree}, nil
}

// TestBuilderWritesThePublishedTree: the drive the builder streams, in
// either format, carries the published tree (its revision); another
// host's instance is refused with the core's error; no temporary drive
// is left behind.
func TestBuilderWritesThePublishedTree(t *testing.T) {
	ctx := context.Background()
	tree, err := metadata.Render(&model.Instance{Name: "app-1", UUID: "5b1f0b5c-3f1a-4c47-9d64-0e0b4e1f5a11"}, metadata.Options{Revision: 4})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := tree.Encode()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	p := published{tree: enc}
	b := configdrive.NewBuilder(p, p, tmp)
	for _, f := range []drive.Format{drive.ISO9660, drive.VFAT} {
		var buf bytes.Buffer
		n, err := b.WriteConfigDrive(ctx, "app-1", f, &buf)
		if err != nil || n != int64(buf.Len()) {
			t.Fatalf("%s: %d bytes (%d written), %v", f, n, buf.Len(), err)
		}
		path := filepath.Join(t.TempDir(), "drive")
		if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		got, label, err := drive.Read(path)
		if err != nil || !strings.EqualFold(label, "config-2") || metadata.TreeRevision(got) != 4 {
			t.Errorf("%s: label %q, revision %d, %v", f, label, metadata.TreeRevision(got), err)
		}
	}
	if _, err := b.WriteConfigDrive(ctx, "other-1", drive.ISO9660, &bytes.Buffer{}); !errors.Is(err, errOtherHost) {
		t.Errorf("another host's instance: %v, want the core's refusal", err)
	}
	if _, err := b.WriteConfigDrive(ctx, "gone", drive.ISO9660, &bytes.Buffer{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("no such instance: %v, want not found", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left in the data directory: %v", ents)
	}
}
