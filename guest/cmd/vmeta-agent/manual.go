package main

import (
	"flag"
	"io"
	"strings"

	"github.com/vmeta/vmeta/guest"
	"github.com/vmeta/vmeta/guest/shares"
	"github.com/vmeta/vmeta/guest/udev"
	"github.com/vmeta/vmeta/internal/manpage"
	"github.com/vmeta/vmeta/internal/version"
)

// writeManual writes vmeta-agent(8) from the command table: every command
// with the flags its setup registers.
func writeManual(w io.Writer) error {
	p := manpage.Page{Name: "vmeta-agent", Section: "8", Summary: "vmeta guest agent: device role tags, by-tag links and virtiofs shares",
		Date: manpage.Date(), Source: "vmeta " + version.String(), Manual: manpage.ManualTitle}
	var cmds []manpage.Block
	for _, c := range commands() {
		line := strings.TrimSpace("vmeta-agent " + c.name + " " + c.args)
		p.Synopsis = append(p.Synopsis, line)
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.setup(fs)
		cmds = append(cmds, manpage.Block{Sub: line}, manpage.Block{Text: c.summary + "."})
		cmds = append(cmds, manpage.FlagBlocks(fs)...)
	}
	p.Sections = []manpage.Section{
		{Title: "Description", Blocks: []manpage.Block{{Text: `vmeta-agent reads the instance's device metadata (Nova's meta_data.json devices list, from QEMU's firmware configuration device, a config-2 config drive or the metadata service at 169.254.169.254) and turns it into udev properties (VMETA_TAGS, VMETA_ENCRYPTED), /dev/disk/by-tag/ links, alternative names of network interfaces and mounted virtiofs shares, so that applications find their devices by role.

The vmeta-agent.service unit runs vmeta-agent run early in boot (before local-fs-pre.target); a udev rule starts it when a config drive appears; a cloud-init hook runs vmeta-agent apply in images without the unit.`}}},
		{Title: "Commands", Blocks: cmds},
		{Title: "Exit status", Blocks: []manpage.Block{
			{Tag: "0", Text: "success"},
			{Tag: "1", Text: "the metadata could not be read or is invalid (nothing was changed), a usage error, or another error"},
			{Tag: "2", Text: "applied, with problems: entries that match no device, or several; a share that could not be mounted (see the log or vmeta-agent status)"},
			{Tag: "3", Text: "find found nothing"},
		}},
		{Title: "Files", Blocks: []manpage.Block{
			{Tag: guest.DefaultStateDir, Text: "the agent's state: what the last pass applied (vmeta-agent status)"},
			{Tag: udev.DefaultRulesFile, Text: "the udev rules the agent writes"},
			{Tag: "/dev/disk/by-tag/", Text: "links to the disks by their tags"},
			{Tag: shares.DefaultRoot + "/TAG", Text: "where the virtiofs shares are mounted"},
		}},
		{Title: "See also", Blocks: []manpage.Block{{Text: "udev(7), udevadm(8), cloud-init(1), hostctl(1)"}}},
	}
	return p.Write(w)
}
