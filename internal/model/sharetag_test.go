package model_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/schema"
)

// TestShareTagRuleDescribed: the schemas say what vmeta publishes as a
// share tag (model.MaxShareTagLength characters at most), while the
// published device schemas keep accepting what they accepted (append-only:
// a 255-character tag stays valid there). Issue 20, item 19.
func TestShareTagRuleDescribed(t *testing.T) {
	limit := strconv.Itoa(model.MaxShareTagLength)
	for _, kind := range []schema.Kind{schema.DevicesV11, schema.DevicesV12} {
		var doc struct {
			Defs map[string]struct {
				Comment string `json:"$comment"`
			} `json:"$defs"`
		}
		if err := json.Unmarshal(schema.Source(kind), &doc); err != nil {
			t.Fatal(err)
		}
		c := doc.Defs["share"].Comment
		if !strings.Contains(c, "vmeta publishes tags of at most "+limit) {
			t.Errorf("%s: the share's description does not say what vmeta publishes: %q", kind, c)
		}
		long := `{"devices":[{"type":"share","bus":"none","address":"none","share_id":"1f5a1f4e-7a4b-4c1e-9b0e-2f3a4b5c6d7e","tag":"` + strings.Repeat("a", 255) + `"}]}`
		if err := schema.ValidateJSON(kind, []byte(long)); err != nil {
			t.Errorf("%s no longer accepts a 255-character tag (append-only): %v", kind, err)
		}
	}
	src := string(schema.Source(schema.InstanceSpec))
	if !strings.Contains(src, "vmeta allows at most "+limit+" at every input") {
		t.Error("the instance-spec schema does not state the share tag limit")
	}
}

// TestShareSourceAtInput: a share source with '..', or not absolute, is
// refused when the spec is parsed, whatever the hypervisor (issue 21,
// item 10; where a source must be, inside the share root, is the share
// service's check).
func TestShareSourceAtInput(t *testing.T) {
	for _, tc := range []struct{ source, says string }{
		{"/srv/../etc", "must not contain '..'"},
		{"/var/lib/vmeta/shares/../../../etc", "must not contain '..'"},
		{"data/..", "must be an absolute host directory"},
		{"nfs.example.com:/export", "must be an absolute host directory"},
		{"/srv/a\nb", "control characters"},
	} {
		_, err := model.ParseSpec([]byte(`{"name":"a","shares":[{"share_id":"7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99","source":` + strconv.Quote(tc.source) + `}]}`))
		if err == nil || !strings.Contains(err.Error(), "shares[0].source") || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("source %q: %v; want shares[0].source saying %q", tc.source, err, tc.says)
		}
	}
	if _, err := model.ParseSpec([]byte("name: a\nshares: [{share_id: 7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99, source: /var/lib/vmeta/shares/data}]\n")); err != nil {
		t.Errorf("a clean absolute source (as hostctl records it): %v", err)
	}
}
