package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// newTable is the aligned columns of every table hostctl prints: cells
// separated by tabs, two spaces between columns.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// printList prints a list command's answer: body as JSON under --json;
// otherwise a table of header (tab-separated column names) and, for each
// item, the line row formats (tab-separated cells).
func printList[T any](c *Call, body any, header string, items []T, row func(T) string) error {
	if c.JSON() {
		return c.PrintJSON(body)
	}
	tw := newTable(c.Stdout)
	fmt.Fprintln(tw, header)
	for _, it := range items {
		fmt.Fprintln(tw, row(it))
	}
	return tw.Flush()
}

// orEmpty is s, or an empty slice for nil: a list printed as JSON is
// [], never null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// writeFields writes a show command's fields, one "Name:<tab>value" line
// each, to tw.
func writeFields(tw io.Writer, fields [][2]string) {
	for _, kv := range fields {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
}

// printFields prints a show command's answer: v as JSON under --json;
// otherwise its fields, aligned.
func printFields(c *Call, v any, fields [][2]string) error {
	if c.JSON() {
		return c.PrintJSON(v)
	}
	tw := newTable(c.Stdout)
	writeFields(tw, fields)
	return tw.Flush()
}
