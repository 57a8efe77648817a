package virt

// Firmware configuration (fw_cfg) entries: libvirt's
// <sysinfo type='fwcfg'> (libvirt 6.5 and later) hands files to QEMU's
// firmware configuration device, which QEMU reads when it starts. A guest
// sees them under /sys/firmware/qemu_fw_cfg/by_name/<name>/raw, from its
// earliest stages of boot, without a mount or a network. They are fixed
// while the guest runs: a change to the persistent definition takes effect
// at the next boot.

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/internal/metadata"
)

// MinFirmwareLibVersion is the first libvirt version with
// <sysinfo type='fwcfg'>.
const MinFirmwareLibVersion = "6.5.0"

// FirmwareFile is one fw_cfg entry whose content QEMU reads from a host
// file.
type FirmwareFile struct {
	// Name is the fw_cfg name, "opt/<reverse-domain>/<name>", at most
	// metadata.MaxFirmwareName bytes.
	Name string
	// File is the host file, inside the data directory.
	File string
}

// CheckFirmwareFiles checks entries before they reach libvirt: every
// name by QEMU's rules (metadata.CheckFirmwareName: "opt/", a reverse
// domain, at most 55 bytes), no name twice, every file inside dataDir. The
// error names each entry, its value and the rule.
func CheckFirmwareFiles(dataDir string, files []FirmwareFile) error {
	var errs []error
	seen := map[string]bool{}
	for i, f := range files {
		field := fmt.Sprintf("firmware[%d]", i)
		if err := metadata.CheckFirmwareName(f.Name); err != nil {
			errs = append(errs, fmt.Errorf("%s.name: %w", field, err))
		}
		if seen[f.Name] {
			errs = append(errs, fmt.Errorf("%s.name: %q appears twice (fw_cfg names are unique)", field, f.Name))
		}
		seen[f.Name] = true
		if _, err := ResolveInDataDir(dataDir, f.File); err != nil {
			errs = append(errs, fmt.Errorf("%s.file: %q: %w (entries are files in the data directory %s)", field, f.File, err, dataDir))
		}
	}
	return errors.Join(errs...)
}

// firmwareBlockRE matches a <sysinfo type='fwcfg'> element as libvirt
// formats one (and as SetFirmware writes it), with its indentation and
// line end.
var firmwareBlockRE = regexp.MustCompile(`(?s)[ \t]*<sysinfo\s+type=["']fwcfg["']\s*(?:/>|>.*?</sysinfo>)[ \t]*\n?`)

// osElementRE finds the <os> element the fw_cfg block is put in front of.
var osElementRE = regexp.MustCompile(`(?m)^[ \t]*<os[ >]`)

// SetFirmware returns the domain XML doc with its fw_cfg entries replaced
// by files (none: the <sysinfo type='fwcfg'> element goes). Everything
// else of doc stays byte for byte: it is the persistent definition libvirt
// formatted, with the addresses and controllers it chose. The files are
// checked first (CheckFirmwareFiles); doc is not changed on error.
func SetFirmware(doc []byte, dataDir string, files []FirmwareFile) ([]byte, error) {
	if err := CheckFirmwareFiles(dataDir, files); err != nil {
		return nil, err
	}
	out := firmwareBlockRE.ReplaceAll(doc, nil)
	if len(files) > 0 {
		loc := osElementRE.FindIndex(out)
		if loc == nil {
			return nil, errors.New("set firmware entries: the domain XML has no <os> element")
		}
		block := sysInfoXML{Type: "fwcfg"}
		for _, f := range files {
			block.Entries = append(block.Entries, fwCfgEntryXML{Name: f.Name, File: f.File})
		}
		var buf bytes.Buffer
		enc := xml.NewEncoder(&buf)
		enc.Indent("  ", "  ")
		if err := enc.EncodeElement(block, xml.StartElement{Name: xml.Name{Local: "sysinfo"}}); err != nil {
			return nil, fmt.Errorf("set firmware entries: %w", err)
		}
		b := append(buf.Bytes(), '\n')
		out = append(out[:loc[0]:loc[0]], append(b, out[loc[0]:]...)...)
	}
	got, err := FirmwareFiles(out)
	if err != nil {
		return nil, fmt.Errorf("set firmware entries: %w", err)
	}
	if len(got) != len(files) {
		return nil, fmt.Errorf("set firmware entries: the domain XML has %d entries after the change, want %d", len(got), len(files))
	}
	return out, nil
}

// FirmwareFiles returns the fw_cfg entries of a domain XML, in order.
// Entries with a value instead of a file are returned with File "".
func FirmwareFiles(doc []byte) ([]FirmwareFile, error) {
	// Only the sysinfo elements: the devices are skipped, not decoded
	// (a publish reads the entries of the persistent definition).
	var d struct {
		XMLName xml.Name     `xml:"domain"`
		SysInfo []sysInfoXML `xml:"sysinfo"`
	}
	if err := xml.NewDecoder(bytes.NewReader(doc)).Decode(&d); err != nil {
		return nil, fmt.Errorf("parse domain XML: %w", err)
	}
	var out []FirmwareFile
	for _, s := range d.SysInfo {
		if s.Type != "fwcfg" {
			continue
		}
		for _, e := range s.Entries {
			out = append(out, FirmwareFile{Name: e.Name, File: e.File})
		}
	}
	return out, nil
}

// FirmwareRevision is the metadata revision of a domain's fw_cfg entries:
// hostctl names the files after the revision they carry
// (fw_cfg.<revision>.<entry>). 0 when the domain has none.
func FirmwareRevision(files []FirmwareFile) int64 {
	for _, f := range files {
		if f.Name != metadata.FirmwareRevision {
			continue
		}
		if m := firmwareFileRE.FindStringSubmatch(f.File); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			return n
		}
	}
	return 0
}

// firmwareFileRE matches the file names hostctl gives fw_cfg entries.
var firmwareFileRE = regexp.MustCompile(`fw_cfg\.([0-9]+)\.[a-z]+$`)

// FirmwareFileName is the host file of fw_cfg entry name carrying
// metadata revision rev, in directory dir: fw_cfg.<rev>.<last component of
// name> ("fw_cfg.7.devices"). A new revision gets new files, so the
// persistent definition (next boot) and a running domain (what QEMU read
// at its start) each name the revision they carry.
func FirmwareFileName(dir string, rev int64, name string) string {
	base := name[strings.LastIndexByte(name, '/')+1:]
	return filepath.Join(dir, "fw_cfg."+strconv.FormatInt(rev, 10)+"."+base)
}

// VersionAtLeast compares dotted versions as Conn.Version prints them
// ("9.0.0" >= "6.5.0"); a malformed one is never at least min.
func VersionAtLeast(v, min string) bool {
	parse := func(s string) ([3]int, bool) {
		var out [3]int
		parts := strings.Split(s, ".")
		if len(parts) != 3 {
			return out, false
		}
		for i, p := range parts {
			n, err := strconv.Atoi(p)
			if err != nil || n < 0 {
				return out, false
			}
			out[i] = n
		}
		return out, true
	}
	a, ok1 := parse(v)
	b, ok2 := parse(min)
	if !ok1 || !ok2 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}
