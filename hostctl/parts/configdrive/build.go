package configdrive

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	drive "github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/store"
)

// Owner finds this host's record of an instance (the core: an error
// naming the owner when the instance is another host's).
type Owner interface {
	OwnRecord(ctx context.Context, op, name string) (store.Instance, error)
}

// Documents reads an instance's published document (the store).
type Documents interface {
	Document(ctx context.Context, uuid string) (store.Document, error)
}

// Builder builds an instance's config drive afresh from its published
// metadata, in the format asked, for `hostctl configdrive build` (the
// admin API's /v1/instances/{name}/configdrive). The daemon wires it.
type Builder struct {
	owner   Owner
	docs    Documents
	tempDir string
}

// NewBuilder returns the builder of owner's instances, reading their
// metadata from docs and building in a temporary directory of tempDir
// (the data directory).
func NewBuilder(owner Owner, docs Documents, tempDir string) *Builder {
	return &Builder{owner: owner, docs: docs, tempDir: tempDir}
}

// WriteConfigDrive streams a freshly built config drive of the instance's
// published tree to w.
func (b *Builder) WriteConfigDrive(ctx context.Context, name string, format drive.Format, w io.Writer) (int64, error) {
	rec, err := b.owner.OwnRecord(ctx, "config drive", name)
	if err != nil {
		return 0, err
	}
	doc, err := b.docs.Document(ctx, rec.UUID)
	if err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	tree, err := metadata.DecodeTree(doc.Tree)
	if err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	tmp, err := os.MkdirTemp(b.tempDir, "drive-")
	if err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	p := filepath.Join(tmp, DriveFile)
	if err := drive.Build(p, tree.ConfigDriveFiles(), drive.Options{Format: format}); err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("config drive %s: %w", name, err)
	}
	defer f.Close()
	return io.Copy(w, f)
}
