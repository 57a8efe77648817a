package configdrive

import (
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/fat32"

	"github.com/vmeta/vmeta/internal/metadata"
)

const (
	fatSector = 512
	// go-diskfs FAT32 layout for volumes up to 260 MB: 512-byte sectors, one
	// sector per cluster, 32 reserved sectors, two FATs.
	fatCluster  = 512
	fatReserved = 32
	// go-diskfs refuses a FAT32 volume with less than 32 KiB of data area.
	fatMinData = 32 << 10
	// slack clusters on top of the computed need, for go-diskfs allocating
	// directory clusters slightly differently from our count.
	fatSlackClusters = 16
	// the FAT specification's minimum cluster count for FAT32
	fatMinClusters = 65525
)

// buildVFAT writes a FAT32 image labelled opts.Label holding files into f (an
// empty, writable file). Files must already be validated.
//
// Size: Nova always makes a 64 MiB vfat drive. go-diskfs accepts a FAT32
// volume as small as its content plus 32 KiB of data area (a few hundred KiB
// for a realistic drive) and we use the smallest such size (vfatSize). Such a
// volume has fewer than the 65,525 clusters the FAT specification requires
// for FAT32; Linux (the kernel driver, blkid, fsck.fat, mtools) identifies
// FAT32 by the BPB layout and reads it fine, Windows would misidentify it.
// The file is sparse anyway, so the size matters mostly for copies.
//
// Label: written as given ("config-2"); FAT labels are conventionally upper
// case and some tools upper-case them, and cloud-init accepts both
// "config-2" and "CONFIG-2".
func buildVFAT(f *os.File, files []metadata.File, opts Options) error {
	size := vfatSize(files)
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("configdrive: size vfat image: %w", err)
	}
	fsys, err := fat32.Create(file.New(f, false), size, 0, fatSector, opts.Label, false)
	if err != nil {
		return fmt.Errorf("configdrive: create fat32: %w", err)
	}
	made := map[string]bool{".": true}
	for _, fl := range files {
		if d := path.Dir(fl.Path); !made[d] {
			if err := fsys.Mkdir(d); err != nil {
				return fmt.Errorf("configdrive: mkdir %s: %w", d, err)
			}
			made[d] = true
		}
		// fat32 writes only with O_RDWR (O_WRONLY is treated as read-only).
		w, err := fsys.OpenFile(fl.Path, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return fmt.Errorf("configdrive: create %s: %w", fl.Path, err)
		}
		n, err := w.Write(fl.Data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err == nil && n != len(fl.Data) {
			err = fmt.Errorf("short write: %d of %d bytes", n, len(fl.Data))
		}
		if err != nil {
			return fmt.Errorf("configdrive: write %s: %w", fl.Path, err)
		}
	}
	fixed := map[string]bool{}
	for _, fl := range files {
		top, _, isDir := strings.Cut(fl.Path, "/")
		if !isDir || fixed[top] {
			continue
		}
		if err := fixDotDot(f, fsys, top); err != nil {
			return fmt.Errorf("configdrive: fix %s/..: %w", top, err)
		}
		fixed[top] = true
	}
	return nil
}

// fixDotDot works around a go-diskfs (v1.9.4) FAT32 bug: the ".." entry of a
// directory in the root points at the root directory's cluster (2) instead of
// cluster 0 as the FAT specification requires, which fsck.fat reports as
// "Invalid '..' entry in the second slot". It rewrites that entry's cluster
// number of top-level directory dir to 0.
func fixDotDot(f *os.File, fsys *fat32.FileSystem, dir string) error {
	df, err := fsys.OpenFile(dir, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer df.Close()
	cf, ok := df.(interface{ GetClusterChain() ([]uint32, error) })
	if !ok {
		return fmt.Errorf("go-diskfs file %T has no GetClusterChain", df)
	}
	chain, err := cf.GetClusterChain()
	if err != nil {
		return err
	}
	if len(chain) == 0 || chain[0] < 2 {
		return fmt.Errorf("directory has no clusters")
	}
	off := int64(fsys.DataStart()) + int64(chain[0]-2)*int64(fsys.BytesPerCluster()) + 32 // second slot
	ent := make([]byte, 32)
	if _, err := f.ReadAt(ent, off); err != nil {
		return err
	}
	if string(ent[:11]) != "..         " || ent[11]&0x10 == 0 {
		return fmt.Errorf("second slot is not a \"..\" directory entry")
	}
	ent[20], ent[21], ent[26], ent[27] = 0, 0, 0, 0 // cluster high and low words
	_, err = f.WriteAt(ent, off)
	return err
}

// vfatSize returns the smallest image size (in whole sectors) whose go-diskfs
// FAT32 layout has enough clusters for files.
func vfatSize(files []metadata.File) int64 {
	need := int64(fatSlackClusters)
	entries := map[string]int64{".": 1} // directory -> 32-byte entries; root holds the label
	seen := map[string]bool{}
	add := func(dir, name string) {
		// one short entry plus one long-name entry per 13 UTF-16 units
		entries[dir] += 1 + (int64(len(name))+12)/13
	}
	for _, fl := range files {
		need += max(1, (int64(len(fl.Data))+fatCluster-1)/fatCluster)
		p := fl.Path
		add(path.Dir(p), path.Base(p))
		for d := path.Dir(p); d != "." && !seen[d]; d = path.Dir(d) {
			seen[d] = true
			entries[d] += 2 // "." and ".."
			add(path.Dir(d), path.Base(d))
		}
	}
	for _, n := range entries {
		need += (n*32+fatCluster-1)/fatCluster + 1
	}
	need = max(need, fatMinData/fatCluster, fatMinClusters)
	// go-diskfs sizes the FAT as ceil(4*(total-reserved) / (sector+8))
	// sectors and leaves the rest for data; search the smallest total.
	total := fatReserved + need + 2*((need*4+2*4+fatSector-1)/fatSector)
	for fatDataClusters(total) < need {
		total++
	}
	return total * fatSector
}

// fatDataClusters mirrors fat32.Create's layout for a volume of total sectors.
func fatDataClusters(total int64) int64 {
	denom := int64(fatSector*1 + 8)
	spf := (4*(total-fatReserved) + denom - 1) / denom
	return total - fatReserved - 2*spf
}
