package replica

import (
	"flag"
	"io"

	"github.com/vmeta/vmeta/internal/manpage"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/version"
)

// writeManual writes vmeta-metadata(8), whose OPTIONS are the flags the
// command line takes (flags.register), so the page cannot miss one.
func writeManual(w io.Writer) error {
	fs := flag.NewFlagSet("vmeta-metadata", flag.ContinueOnError)
	var f flags
	f.register(fs)
	p := manpage.Page{Name: "vmeta-metadata", Section: "8", Summary: "a vmeta metadata service replica",
		Date: manpage.Date(), Source: "vmeta " + version.String(), Manual: manpage.ManualTitle,
		Synopsis: []string{"vmeta-metadata --store URL [--listen ADDRESS] [OPTIONS]", "vmeta-metadata man"},
		Sections: []manpage.Section{
			{Title: "Description", Blocks: []manpage.Block{{Text: `vmeta-metadata serves guests the metadata hostctl(1) publishes to a shared store (Redis): the Nova-compatible metadata service (meta_data.json, user data, network data, EC2 paths), with no host controller on its machine, so that any number of replicas can stand behind the metadata address of many hosts.

It identifies a guest by the source address of its request (or, behind trusted metadata proxies, by their signed X-Instance-ID or X-Forwarded-For headers), answers from a cache of the store's documents, and follows the store's change feed. It re-reads the proxy secret and token key files when a key rotation is announced on the feed, every --key-check-interval, and on SIGHUP.

vmeta-metadata man prints this page.`}}},
			{Title: "Options", Blocks: manpage.FlagBlocks(fs)},
			{Title: "Environment", Blocks: []manpage.Block{
				{Tag: storeurl.PasswordEnv, Text: "the store's password, when --store-password-file is not given; never put it in the --store URL, which every user sees on the command line"},
				{Tag: "SOURCE_DATE_EPOCH", Text: "the date vmeta-metadata man puts on this page"},
			}},
			{Title: "Files", Blocks: []manpage.Block{
				{Tag: "/etc/default/vmeta-metadata", Text: "the flags of the vmeta-metadata.service unit ($VMETA_METADATA_OPTS)"},
				{Tag: "/etc/vmeta/store.env", Text: storeurl.PasswordEnv + "=..., readable by root only, which the unit loads"},
			}},
			{Title: "Signals", Blocks: []manpage.Block{
				{Tag: "SIGHUP", Text: "re-read the proxy secret and token key files"},
				{Tag: "SIGTERM", Text: "as SIGINT"},
				{Tag: "SIGINT", Text: "stop: the listeners close, requests in flight get up to 5 seconds to finish"},
			}},
			{Title: "Exit status", Blocks: []manpage.Block{
				{Tag: "0", Text: "stopped by a signal, or --help"},
				{Tag: "1", Text: "an error (the store could not be opened, an address could not be listened on)"},
				{Tag: "2", Text: "a usage error (an unknown flag, no --store)"},
			}},
			{Title: "See also", Blocks: []manpage.Block{{Text: "hostctl(1), hostctl.yaml(5), vmeta-agent(8)"}}},
		}}
	return p.Write(w)
}
