package cli

import (
	"bytes"
	"testing"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
)

func TestProgressBar(t *testing.T) {
	for _, c := range []struct {
		p    keyrotation.Progress
		want string
	}{
		{keyrotation.Progress{Done: 0, Total: 4}, "\rkek [" + spaces(40) + "] 0 / 4   0%"},
		{keyrotation.Progress{Done: 1, Total: 4}, "\rkek [" + eq(10) + spaces(30) + "] 1 / 4  25%"},
		{keyrotation.Progress{Done: 100000, Total: 100000}, "\rkek [" + eq(40) + "] 100000 / 100000 100%"},
	} {
		var b bytes.Buffer
		bar := &progressBar{w: &b, name: "kek"}
		bar.draw(c.p)
		if b.String() != c.want {
			t.Errorf("draw(%+v) = %q, want %q", c.p, b.String(), c.want)
		}
		bar.finish()
		if !bytes.HasSuffix(b.Bytes(), []byte("%\n")) {
			t.Errorf("finish did not end the line: %q", b.String())
		}
	}
	var nilBar *progressBar
	nilBar.finish() // no bar (not a terminal): nothing to end
}

func spaces(n int) string { return string(bytes.Repeat([]byte(" "), n)) }
func eq(n int) string     { return string(bytes.Repeat([]byte("="), n)) }
