package driveread

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"

	"github.com/vmeta/vmeta/configdrive/internal/isowriter"
	"github.com/vmeta/vmeta/internal/metadata"
)

// fat12Image hand-builds an 8 KiB FAT12 volume: boot sector, two one-sector
// FATs, a one-sector root directory (16 entries) and 12 data clusters of 512
// bytes. It holds one file, FILE.TXT, of size bytes starting at cluster 2;
// fat lists the FAT entries from cluster 2 on (0xFFF ends a chain).
func fat12Image(size uint32, fat ...uint16) []byte {
	const sector = 512
	img := make([]byte, 16*sector)
	bs := img[:sector]
	copy(bs, []byte{0xEB, 0x3C, 0x90})
	copy(bs[3:], "MSWIN4.1")
	binary.LittleEndian.PutUint16(bs[11:], sector) // bytes per sector
	bs[13] = 1                                     // sectors per cluster
	binary.LittleEndian.PutUint16(bs[14:], 1)      // reserved sectors
	bs[16] = 2                                     // FATs
	binary.LittleEndian.PutUint16(bs[17:], 16)     // root entries
	binary.LittleEndian.PutUint16(bs[19:], 16)     // total sectors
	bs[21] = 0xF8                                  // media
	binary.LittleEndian.PutUint16(bs[22:], 1)      // sectors per FAT
	binary.LittleEndian.PutUint16(bs[24:], 32)     // sectors per track
	binary.LittleEndian.PutUint16(bs[26:], 2)      // heads
	bs[36] = 0x80                                  // drive number
	bs[38] = 0x29                                  // extended boot signature
	binary.LittleEndian.PutUint32(bs[39:], 0x12345678)
	copy(bs[43:], "config-2   ")
	copy(bs[54:], "FAT12   ")
	bs[510], bs[511] = 0x55, 0xAA
	for copyAt := 1; copyAt <= 2; copyAt++ {
		f := img[copyAt*sector : (copyAt+1)*sector]
		put := func(i int, v uint16) {
			off := i * 3 / 2
			if i%2 == 0 {
				f[off] = byte(v)
				f[off+1] = f[off+1]&0xF0 | byte(v>>8)&0x0F
			} else {
				f[off] = f[off]&0x0F | byte(v<<4)
				f[off+1] = byte(v >> 4)
			}
		}
		put(0, 0xFF8)
		put(1, 0xFFF)
		for i, v := range fat {
			put(2+i, v)
		}
	}
	root := img[3*sector:]
	copy(root, "CONFIG-2   ")
	root[11] = 0x08 // volume label
	ent := root[32:64]
	copy(ent, "FILE    TXT")
	ent[11] = 0x20
	binary.LittleEndian.PutUint16(ent[26:], 2)
	binary.LittleEndian.PutUint32(ent[28:], size)
	copy(img[4*sector:], "hello from cluster 2\n")
	return img
}

// corruptISO builds the ISO of files and lets patch change it.
func corruptISO(t testing.TB, files map[string]string, patch func(img []byte)) []byte {
	t.Helper()
	var fs []metadata.File
	for p, d := range files {
		fs = append(fs, metadata.File{Path: p, Data: []byte(d)})
	}
	var buf bytes.Buffer
	im, err := isowriter.New(fs, isowriter.Options{VolumeID: "config-2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := im.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	img := buf.Bytes()
	patch(img)
	return img
}

// isoRootExtent returns the root directory's extent from the primary volume
// descriptor.
func isoRootExtent(img []byte) []byte {
	pvd := img[pvdOffset:]
	at := int(binary.LittleEndian.Uint32(pvd[vdRootRecord+drExtent:])) * isoBlock
	n := int(binary.LittleEndian.Uint32(pvd[vdRootRecord+drDataLength:]))
	return img[at : at+n]
}

// isoRecord returns the directory record named name (ISO 9660 name) in dir.
func isoRecord(dir []byte, name string) []byte {
	for i := 0; i < len(dir); {
		n := int(dir[i])
		if n == 0 {
			i = (i/isoBlock + 1) * isoBlock
			continue
		}
		rec := dir[i : i+n]
		if l := int(rec[32]); string(rec[33:33+l]) == name {
			return rec
		}
		i += n
	}
	panic("no record " + name)
}

// TestReadCorruptDrive: drives on which go-diskfs (v1.9.4) runs forever or
// allocates what the drive claims, found by reading its readers; Read now
// answers each with an error naming the problem.
func TestReadCorruptDrive(t *testing.T) {
	tests := []struct {
		name string
		img  func(t *testing.T) []byte
		want string
	}{
		{
			// the sane base of the cases below
			name: "fat12 ok",
			img:  func(*testing.T) []byte { return fat12Image(21, 0xFFF) },
		},
		{
			// go-diskfs: getClusterList appends forever
			name: "fat cluster chain loops",
			img:  func(*testing.T) []byte { return fat12Image(21, 2) },
			want: "FAT12: cluster chain loops at cluster 2",
		},
		{
			name: "fat cluster chain loops through three",
			img:  func(*testing.T) []byte { return fat12Image(21, 3, 4, 2) },
			want: "cluster chain loops",
		},
		{
			// go-diskfs: File.Read returns 0, nil at the end of the
			// chain, and io.ReadFull spins
			name: "fat file larger than its chain",
			img:  func(*testing.T) []byte { return fat12Image(5000, 0xFFF) },
			want: "cluster chain of 1 clusters holds 512 bytes, less than the file's 5000",
		},
		{
			// go-diskfs: allocates and decodes the claimed FAT
			name: "fat claims a 32 MiB FAT",
			img: func(*testing.T) []byte {
				img := fat12Image(21, 0xFFF)
				binary.LittleEndian.PutUint16(img[22:], 0xFFFF)
				return img
			},
			want: "FAT16 of 33553920 bytes (readMaxFAT 16777216)",
		},
		{
			name: "fat32 claims a 4 GiB FAT",
			img: func(*testing.T) []byte {
				// a FAT32 boot sector: no fixed root directory,
				// version 0, extended signature at 66
				img := fat12Image(21, 0xFFF)
				binary.LittleEndian.PutUint16(img[17:], 0)
				binary.LittleEndian.PutUint32(img[36:], 0x7FFFFF)
				binary.LittleEndian.PutUint16(img[42:], 0)
				img[66] = 0x29
				return img
			},
			want: "FAT32 of 4294966784 bytes (readMaxFAT 16777216)",
		},
		{
			name: "iso directory contains itself",
			img: func(t *testing.T) []byte {
				return corruptISO(t, map[string]string{"a/b": "x", "c": "y"}, func(img []byte) {
					root := isoRootExtent(img)
					a := isoRecord(root, "A")
					self := isoRecord(root, "\x00") // the root's own "." record
					copy(a[2:10], self[2:10])       // extent, both byte orders
					copy(a[10:18], self[10:18])     // data length
				})
			},
			want: "a directory loop",
		},
		{
			// go-diskfs: allocates the claimed path table
			name: "iso claims a 4 GiB path table",
			img: func(t *testing.T) []byte {
				return corruptISO(t, map[string]string{"c": "y"}, func(img []byte) {
					binary.LittleEndian.PutUint32(img[pvdOffset+vdPathTableSize:], 0xFFFFFFF0)
				})
			},
			want: "path table of 4294967280 bytes",
		},
		{
			name: "iso without a set terminator",
			img: func(t *testing.T) []byte {
				img := corruptISO(t, map[string]string{"c": "y"}, func([]byte) {})
				img = append(img, make([]byte, 80*isoBlock)...)
				for i := 1; i <= 70; i++ {
					copy(img[pvdOffset+i*isoBlock:], img[pvdOffset:pvdOffset+isoBlock])
				}
				return img
			},
			want: "readMaxVolumeDescriptors",
		},
	}
	dir := t.TempDir()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, fmt.Sprint(i))
			if err := os.WriteFile(p, tt.img(t), 0o600); err != nil {
				t.Fatal(err)
			}
			files, _, err := Read(p)
			if tt.want == "" {
				if err != nil || len(files) == 0 {
					t.Fatalf("Read = %v, %v; want files", files, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Read = %v\nwant an error containing %q", err, tt.want)
			}
		})
	}
}

func TestGuardedStorageLimits(t *testing.T) {
	p := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g := newGuard(file.New(f, true), 4096)
	g.maxCalls, g.maxBytes = 100, 100*4096
	if _, err := g.ReadAt(make([]byte, 8192), 0); !errors.Is(err, ErrLimit) || g.err != nil {
		t.Errorf("oversized read: %v (sticky %v), want ErrLimit, not sticky", err, g.err)
	}
	buf := make([]byte, 4096)
	for range g.maxCalls - 1 {
		if _, err := g.ReadAt(buf[:1], 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.ReadAt(buf[:1], 0); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "readMaxIOCalls") {
		t.Errorf("read %d: %v, want the call limit", g.maxCalls+1, err)
	}
	if _, err := g.ReadAt(buf[:1], 0); !errors.Is(err, ErrLimit) {
		t.Errorf("after the limit: %v, want it to stick", err)
	}
	g = newGuard(file.New(f, true), 4096)
	g.maxCalls, g.maxBytes = 100, 3*4096
	for range 3 {
		if _, err := g.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.ReadAt(buf[:1], 0); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "readMaxIO") {
		t.Errorf("read past %d bytes: %v, want the byte limit", g.maxBytes, err)
	}
}
