// Package manpage writes manual pages in roff (the man(7) macros) from
// plain text and flag sets, so that each binary prints its own page from
// the same tables that make its --help: hostctl from its command table,
// vmeta-metadata and vmeta-agent from their flag sets.
//
// It is written here rather than taken from a library: the Go generators
// in use (cobra's doc package, go-md2man) want either a cobra command tree
// or Markdown, and none of vmeta's binaries is a cobra program (hostctl has
// its own table, hostctl/cli.Command; the others use package flag). What
// a page needs is small: the .TH header, sections, tagged paragraphs and
// escaping (backslashes, option dashes as \-, non-ASCII as \[uXXXX], so
// groff reads the page as plain ASCII and prints no warning). It imports
// only the standard library, so the guest agent may link it.
package manpage

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Page is one manual page.
type Page struct {
	// Name and Section: "hostctl", "1".
	Name, Section string
	// Summary is the NAME line's text after the dash (what apropos shows).
	Summary string
	// Date is the page's date (YYYY-MM-DD), empty for none; see Date.
	Date string
	// Source is the header's source, "vmeta v1.2.3".
	Source string
	// Manual is the header's manual title.
	Manual string
	// Synopsis lines: the first word of each is bold.
	Synopsis []string
	// Sections follow NAME and SYNOPSIS.
	Sections []Section
}

// Section is a .SH section.
type Section struct {
	Title  string
	Blocks []Block
}

// Block is a paragraph: under a .SS heading (Sub), a tagged paragraph
// (Tag: its first word bold, the rest italic), or plain (neither). Text
// is prose: lines are filled; a blank line starts a new paragraph; lines
// indented by a space or a tab are printed as they are.
type Block struct {
	Sub  string
	Tag  string
	Text string
}

// ManualTitle is the manual vmeta's pages belong to.
const ManualTitle = "vmeta Manual"

// Date is the date pages carry: that of $SOURCE_DATE_EPOCH (the
// reproducible-builds variable `make package` sets to the commit time),
// empty without it, so that the same build gives the same page.
func Date() string {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return ""
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return ""
	}
	return time.Unix(n, 0).UTC().Format("2006-01-02")
}

// Write writes the page as roff.
func (p *Page) Write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH %s %s %s %s %s\n", arg(strings.ToUpper(p.Name)), arg(p.Section), arg(p.Date), arg(p.Source), arg(p.Manual))
	// Left-aligned, not hyphenated: flags and paths stay whole.
	b.WriteString(".ad l\n.nh\n")
	b.WriteString(".SH NAME\n")
	fmt.Fprintf(&b, "%s \\- %s\n", escape(p.Name), escape(p.Summary))
	if len(p.Synopsis) > 0 {
		b.WriteString(".SH SYNOPSIS\n")
		for i, l := range p.Synopsis {
			if i > 0 {
				b.WriteString(".br\n")
			}
			first, rest, _ := strings.Cut(l, " ")
			fmt.Fprintf(&b, "\\fB%s\\fR", escape(first))
			if rest != "" {
				b.WriteString(" " + escape(rest))
			}
			b.WriteString("\n")
		}
	}
	for _, s := range p.Sections {
		fmt.Fprintf(&b, ".SH %s\n", arg(strings.ToUpper(s.Title)))
		for _, bl := range s.Blocks {
			switch {
			case bl.Sub != "":
				fmt.Fprintf(&b, ".SS\n%s\n", line(escape(bl.Sub)))
			case bl.Tag != "":
				first, rest, _ := strings.Cut(bl.Tag, " ")
				fmt.Fprintf(&b, ".TP\n\\fB%s\\fR", escape(first))
				if rest != "" {
					fmt.Fprintf(&b, " \\fI%s\\fR", escape(rest))
				}
				b.WriteString("\n")
			default:
				b.WriteString(".PP\n")
			}
			text(&b, bl.Text, bl.Tag != "")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// text writes prose: filled paragraphs, indented lines kept as they are.
// In a tagged paragraph (tagged), a new paragraph keeps the indent.
func text(b *strings.Builder, s string, tagged bool) {
	s = strings.Trim(s, "\n")
	if s == "" {
		return
	}
	literal := false
	for i, l := range strings.Split(s, "\n") {
		isLit := strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")
		switch {
		case isLit && !literal:
			b.WriteString(".nf\n")
			literal = true
		case !isLit && literal:
			b.WriteString(".fi\n")
			literal = false
		}
		if strings.TrimSpace(l) == "" {
			if i > 0 && !literal {
				if tagged {
					b.WriteString(".IP\n")
				} else {
					b.WriteString(".PP\n")
				}
			}
			continue
		}
		if literal {
			l = strings.ReplaceAll(strings.TrimRight(l, " \t"), "\t", "        ")
		} else {
			l = strings.TrimSpace(l)
		}
		b.WriteString(line(escape(l)) + "\n")
	}
	if literal {
		b.WriteString(".fi\n")
	}
}

// line protects a text line that would start with a control character.
func line(s string) string {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return `\&` + s
	}
	return s
}

// arg quotes a macro argument.
func arg(s string) string {
	return `"` + strings.ReplaceAll(escape(s), `"`, `\(dq`) + `"`
}

// escape makes text safe for roff: a backslash is \e, the dashes of an
// option (a word that starts with a dash, as --data-dir or -f) are minus
// signs \- (so it can be searched for and copied, and is never broken at
// a line's end), other dashes stay hyphens, and every non-ASCII character
// is \[uXXXX].
func escape(s string) string {
	var b strings.Builder
	wordStart, inOption := true, false
	for _, r := range s {
		boundary := strings.ContainsRune(" \t([{|=,;\"'<`", r)
		switch {
		case r == '\\':
			b.WriteString(`\e`)
		case r == '-' && (wordStart || inOption):
			b.WriteString(`\-`)
			inOption = true
		case r > 0x7e || (r < 0x20 && r != '\t'):
			fmt.Fprintf(&b, `\[u%04X]`, r)
		default:
			b.WriteRune(r)
		}
		if boundary {
			inOption = false
		}
		wordStart = boundary
	}
	return b.String()
}

// Flag is one flag of a flag set, as a page lists it.
type Flag struct {
	// Name without dashes; Arg the value's name ("" for a boolean).
	Name, Arg string
	Usage     string
	// Default is the default value, empty when it is the zero value.
	Default string
}

// Flags lists the flags of fs in its order (sorted by name).
func Flags(fs *flag.FlagSet) []Flag {
	var out []Flag
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fl := Flag{Name: f.Name, Arg: name, Usage: usage}
		switch f.DefValue {
		case "", "0", "false", "0s", "[]":
		default:
			fl.Default = f.DefValue
		}
		out = append(out, fl)
	})
	return out
}

// Option is how an option is written: -f for one letter, --name else.
func Option(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// Block is the flag's tagged paragraph: --name ARG, its usage and its
// default.
func (f Flag) Block() Block {
	tag := Option(f.Name)
	if f.Arg != "" {
		tag += " " + f.Arg
	}
	t := f.Usage
	if f.Default != "" {
		t += " (default: " + f.Default + ")"
	}
	return Block{Tag: tag, Text: t}
}

// FlagBlocks are the tagged paragraphs of the flags of fs, but those
// skip names.
func FlagBlocks(fs *flag.FlagSet, skip ...string) []Block {
	var out []Block
	for _, f := range Flags(fs) {
		if !slices.Contains(skip, f.Name) {
			out = append(out, f.Block())
		}
	}
	return out
}
