package configdrive

import (
	"os"
	"testing"
)

func TestScratch(t *testing.T) {
	out := os.Getenv("SCRATCH")
	if err := Build(out+"/a.iso", SampleFiles(), Options{}); err != nil {
		t.Fatal(err)
	}
	if err := Build(out+"/a.vfat", SampleFiles(), Options{Format: VFAT}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.iso", "a.vfat"} {
		tr, l, err := Read(out + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %q %d files", f, l, len(tr.Files))
	}
	t.Logf("%d files", len(SampleFiles()))
}
