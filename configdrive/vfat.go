package configdrive

import (
	"encoding/binary"
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
	// the FAT specification's minimum cluster count for FAT32
	fatMinClusters = 65525
	// slack clusters on top of the computed need, for go-diskfs allocating
	// directory clusters slightly differently from our count.
	fatSlackClusters = 16
	// go-diskfs switches to 4 KiB clusters above 260 MiB; config drives are
	// far smaller, and vfatSize assumes 512-byte clusters.
	fatMaxSize = 260 << 20
)

// buildVFAT writes a FAT32 image labelled opts.Label holding files into f (an
// empty, writable file). Files must already be validated.
//
// Size: Nova always makes a 64 MiB vfat drive (mkfs.vfat picks FAT16 there).
// go-diskfs's fat32.Create accepts anything from 32 reserved sectors plus
// 32 KiB of data area, i.e. a few hundred KiB for a realistic drive, but such
// a volume has far fewer than the 65,525 clusters the FAT specification
// requires of FAT32. Windows and mtools (which cloudbase-init uses to read
// vfat config drives) then take it for FAT12/16 and read garbage; fsck.fat
// warns. So vfatSize picks the smallest size go-diskfs lays out with at least
// 65,525 clusters (512-byte clusters up to 260 MiB: 34,089,472 bytes, about
// 32.5 MiB), or more when the content needs it. The file is sparse: a
// realistic drive occupies about 600 KiB on disk (mostly the two 256 KiB FATs).
//
// Label: written as given ("config-2"); FAT labels are conventionally upper
// case and some tools upper-case them, and cloud-init accepts both
// "config-2" and "CONFIG-2".
//
// Long names: go-diskfs writes VFAT long-name entries (with unique ~N short
// names), so names like meta_data.json, vendor_data2.json and 2012-08-10
// round-trip.
func buildVFAT(f *os.File, files []metadata.File, opts Options) error {
	size, err := vfatSize(files)
	if err != nil {
		return err
	}
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
	// Work around two go-diskfs (v1.9.4) FAT bugs that fsck.fat reports
	// (the Linux kernel and mtools read the image either way).
	fixed := map[string]bool{}
	for _, fl := range files {
		if len(fl.Data) == 0 {
			if err := freeEmptyFile(f, fsys, fl.Path); err != nil {
				return fmt.Errorf("configdrive: fix empty file %s: %w", fl.Path, err)
			}
		}
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

// clusterChain returns the clusters of file or directory p ("." is the root).
func clusterChain(fsys *fat32.FileSystem, p string) ([]uint32, error) {
	df, err := fsys.OpenFile(p, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer df.Close()
	cf, ok := df.(interface{ GetClusterChain() ([]uint32, error) })
	if !ok {
		return nil, fmt.Errorf("go-diskfs file %T has no GetClusterChain", df)
	}
	chain, err := cf.GetClusterChain()
	if err == nil && (len(chain) == 0 || chain[0] < 2) {
		err = fmt.Errorf("%s has no clusters", p)
	}
	return chain, err
}

func clusterOffset(fsys *fat32.FileSystem, c uint32) int64 {
	return int64(fsys.DataStart()) + int64(c-2)*int64(fsys.BytesPerCluster())
}

// Short directory entry layout (32 bytes).
const (
	dirEntrySize  = 32
	dirAttr       = 11
	dirClusterHi  = 20
	dirClusterLo  = 26
	dirFileSize   = 28
	attrVolumeID  = 0x08
	attrDirectory = 0x10
	attrLongName  = 0x0f
)

func setEntryCluster(ent []byte, c uint32) {
	binary.LittleEndian.PutUint16(ent[dirClusterHi:], uint16(c>>16))
	binary.LittleEndian.PutUint16(ent[dirClusterLo:], uint16(c))
}

func entryCluster(ent []byte) uint32 {
	return uint32(binary.LittleEndian.Uint16(ent[dirClusterHi:]))<<16 | uint32(binary.LittleEndian.Uint16(ent[dirClusterLo:]))
}

// fixDotDot: go-diskfs points the ".." entry of a directory in the root at
// the root directory's cluster (2); the FAT specification requires 0 there
// (fsck.fat: "Invalid '..' entry in the second slot"). Rewrite it for the
// top-level directory dir.
func fixDotDot(f *os.File, fsys *fat32.FileSystem, dir string) error {
	chain, err := clusterChain(fsys, dir)
	if err != nil {
		return err
	}
	off := clusterOffset(fsys, chain[0]) + dirEntrySize // second slot
	ent := make([]byte, dirEntrySize)
	if _, err := f.ReadAt(ent, off); err != nil {
		return err
	}
	if string(ent[:11]) != "..         " || ent[dirAttr]&attrDirectory == 0 {
		return fmt.Errorf("second slot is not a \"..\" directory entry")
	}
	setEntryCluster(ent, 0)
	_, err = f.WriteAt(ent, off)
	return err
}

// freeEmptyFile: go-diskfs allocates a cluster to every new file, so an empty
// file keeps a one-cluster chain (fsck.fat: "File size is 0 bytes, cluster
// chain length is > 0 bytes"). Give empty file p cluster 0, as mkfs tools and
// kernels do, and free its cluster in every FAT.
func freeEmptyFile(f *os.File, fsys *fat32.FileSystem, p string) error {
	chain, err := clusterChain(fsys, p)
	if err != nil {
		return err
	}
	if len(chain) != 1 {
		return fmt.Errorf("empty file has %d clusters", len(chain))
	}
	c := chain[0]
	dirChain, err := clusterChain(fsys, path.Dir(p))
	if err != nil {
		return err
	}
	buf := make([]byte, fsys.BytesPerCluster())
	found := false
	for _, dc := range dirChain {
		off := clusterOffset(fsys, dc)
		if _, err := f.ReadAt(buf, off); err != nil {
			return err
		}
		for i := 0; i+dirEntrySize <= len(buf); i += dirEntrySize {
			ent := buf[i : i+dirEntrySize]
			if ent[0] == 0 || ent[0] == 0xe5 || ent[dirAttr] == attrLongName ||
				ent[dirAttr]&(attrDirectory|attrVolumeID) != 0 ||
				entryCluster(ent) != c || binary.LittleEndian.Uint32(ent[dirFileSize:]) != 0 {
				continue
			}
			if found {
				return fmt.Errorf("cluster %d is used by two directory entries", c)
			}
			found = true
			setEntryCluster(ent, 0)
			if _, err := f.WriteAt(ent, off+int64(i)); err != nil {
				return err
			}
		}
	}
	if !found {
		return fmt.Errorf("no directory entry for cluster %d", c)
	}
	// Free the cluster in each FAT. Boot sector: reserved sectors (uint16 at
	// 14), number of FATs (16), FAT32 sectors per FAT (uint32 at 36).
	bs := make([]byte, fatSector)
	if _, err := f.ReadAt(bs, 0); err != nil {
		return err
	}
	reserved := int64(binary.LittleEndian.Uint16(bs[14:]))
	nfats := int64(bs[16])
	spf := int64(binary.LittleEndian.Uint32(bs[36:]))
	for i := range nfats {
		off := (reserved+i*spf)*fatSector + 4*int64(c)
		if _, err := f.WriteAt([]byte{0, 0, 0, 0}, off); err != nil {
			return err
		}
	}
	return nil
}

// vfatSize returns the smallest image size (in whole sectors) whose go-diskfs
// FAT32 layout has enough clusters for files and at least fatMinClusters.
func vfatSize(files []metadata.File) (int64, error) {
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
	// sectors and leaves the rest for data. The cluster count is not
	// monotonic in the size (a FAT growing by a sector costs two), so search
	// upwards from the size without FATs.
	total := fatReserved + need
	for fatDataClusters(total) < need {
		total++
	}
	if total*fatSector > fatMaxSize {
		return 0, fmt.Errorf("configdrive: %d bytes of content is too much for a vfat config drive (limit %d MiB)", total*fatSector, fatMaxSize>>20)
	}
	return total * fatSector, nil
}

// fatDataClusters mirrors fat32.Create's layout for a volume of total sectors.
func fatDataClusters(total int64) int64 {
	denom := int64(fatSector*1 + 8)
	spf := (4*(total-fatReserved) + denom - 1) / denom
	return total - fatReserved - 2*spf
}
