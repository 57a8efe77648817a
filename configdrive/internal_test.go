package configdrive

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/vmeta/vmeta/configdrive/driveread"
)

// TestSizeBounds: the vfat size is a spec-conformant FAT32 (>= 65525
// clusters), and the smallest such.
func TestSizeBounds(t *testing.T) {
	files := SampleFiles()
	size, err := vfatSize(files)
	if err != nil {
		t.Fatal(err)
	}
	if c := fatDataClusters(size / fatSector); c < fatMinClusters {
		t.Errorf("vfat size %d has %d clusters", size, c)
	}
	if c := fatDataClusters(size/fatSector - 1); c >= fatMinClusters {
		t.Errorf("vfat size %d is not the smallest: one sector less still has %d clusters", size, c)
	}
	big := append(SampleFiles(), SampleFiles()[0])
	big[len(big)-1].Path = "big"
	big[len(big)-1].Data = make([]byte, 40<<20)
	bigSize, err := vfatSize(big)
	if err != nil {
		t.Fatal(err)
	}
	if got := fatDataClusters(bigSize / fatSector); got < (40<<20)/fatCluster {
		t.Errorf("vfat size for 40 MiB of content has only %d clusters", got)
	}
	big[len(big)-1].Data = make([]byte, 300<<20)
	if _, err := vfatSize(big); err == nil {
		t.Error("vfatSize accepted 300 MiB of content")
	}
}

// TestISOGolden pins the ISO image of the sample tree at a fixed recording
// time: builds are reproducible, and any change of layout or size shows up
// here (update the figures after checking the change with the tool tests).
func TestISOGolden(t *testing.T) {
	opts, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, 4, 4, 0, 0, 0, 0, time.UTC)
	im, err := newISO(SampleFiles(), opts, now)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := im.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	const (
		wantSize = 88 * isoBlock
		wantSum  = "ea50c4455c2d4c4a1a7374cccd4c29f1fb73ca024d388342bf361a78e08899a1"
	)
	if buf.Len() != wantSize || hex.EncodeToString(sum[:]) != wantSum {
		t.Errorf("sample ISO: %d bytes, sha256 %x; want %d bytes, %s", buf.Len(), sum, wantSize, wantSum)
	}
	if size, err := driveread.ISOVolumeSize(bytes.NewReader(buf.Bytes())); err != nil || size != int64(buf.Len()) {
		t.Errorf("volume size %d (%v), image %d bytes", size, err, buf.Len())
	}
}
