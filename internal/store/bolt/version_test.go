package bolt

import (
	"encoding/json"
	"testing"

	"github.com/vmeta/vmeta/internal/store"
)

// versionCases are document records, as json.Marshal writes them and
// otherwise.
var versionCases = []string{
	`{"instance_uuid":"u","version":7,"tree":"AAAA"}`,
	`{"tree":"AAAA","addresses":["10.0.0.1"],"version":9}`,
	`{"instance_uuid":"u"}`,
	`[1]`,
	``,
	`{"version":"x"}`,
	` { "a" : { "version" : 1, "b": [ "}", {"c": "\"]"} ] } , "version" : 12 } `,
	`{"vers\u0069on":5,"version":6}`,
	`{"version":5,"version":6}`,
	`{"version":007}`,
	`{"version":1.5}`,
	`{"version":1e3}`,
	`{"version":-3}`,
	`{"version":99999999999999999999}`,
	`{"a":"x\\","version":4}`,
	`{"a":null,"b":true,"c":-1.5e-3,"version":8}`,
	`{"version":}`,
	`{"a" 1,"version":2}`,
}

// TestVersionFast: where the fast scan answers, the decoder answers the
// same; where it cannot tell, documentVersion still answers as the
// decoder does.
func TestVersionFast(t *testing.T) {
	doc, err := json.Marshal(store.Document{InstanceUUID: "u-1", ProjectID: "p", Addresses: []string{"10.0.0.1"}, Version: 42, Tree: []byte("tree")})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := versionFast(doc); !ok || v != 42 {
		t.Errorf("versionFast(%s) = %d, %t; want 42 (a record as json.Marshal writes it)", doc, v, ok)
	}
	for _, in := range append(versionCases, string(doc)) {
		checkVersion(t, []byte(in))
	}
}

func checkVersion(t *testing.T, data []byte) {
	t.Helper()
	want, werr := decodeVersion(data)
	got, err := documentVersion(data)
	if got != want || (err == nil) != (werr == nil) {
		t.Errorf("documentVersion(%q) = %d, %v; the decoder says %d, %v", data, got, err, want, werr)
	}
	if v, ok := versionFast(data); ok && (werr != nil || v != want) && json.Valid(data) {
		t.Errorf("versionFast(%q) = %d; the decoder says %d, %v", data, v, want, werr)
	}
}

// FuzzVersionFast: on valid JSON, the fast scan never answers other than
// the decoder.
func FuzzVersionFast(f *testing.F) {
	for _, c := range versionCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		checkVersion(t, data)
	})
}

// hostCases are instance records, as json.Marshal writes them and
// otherwise.
var hostCases = []string{
	`{"name":"a","uuid":"u","host":"h1","spec":"e30=","revision":1}`,
	`{"name":"a","uuid":"u","spec":"e30=","revision":1}`,
	`{"name":"a","host":"h\u0031","revision":1}`,
	`{"name":"a","ho\u0073t":"x","host":"h1"}`,
	`{"name":"a","host":"h1" ,"revision":1}`,
	`{"name":"a","host":7}`,
	`{"name":{"host":"inner"},"host":"outer"}`,
	`{"name":"a","host":"h1"`,
	`{"host":""}`,
	`[]`,
}

// TestHostFast: where the fast scan answers, the decoder answers the
// same (a record as json.Marshal writes it is always answered).
func TestHostFast(t *testing.T) {
	rec, err := json.Marshal(store.Instance{Name: "web", UUID: "u-1", Host: "host-a", Addresses: []string{"10.0.0.1"}, Spec: []byte(`{"x":1}`), Revision: 3})
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := hostFast(rec); !ok || string(h) != "host-a" {
		t.Errorf("hostFast(%s) = %q, %t; want host-a", rec, h, ok)
	}
	for _, in := range append(hostCases, string(rec)) {
		checkHost(t, []byte(in))
	}
}

func checkHost(t *testing.T, data []byte) {
	t.Helper()
	var rec struct {
		Host string `json:"host"`
	}
	werr := json.Unmarshal(data, &rec)
	if h, ok := hostFast(data); ok && (werr != nil || string(h) != rec.Host) && json.Valid(data) {
		t.Errorf("hostFast(%q) = %q; the decoder says %q, %v", data, h, rec.Host, werr)
	}
}

// FuzzHostFast: on valid JSON, the fast scan never answers other than
// the decoder.
func FuzzHostFast(f *testing.F) {
	for _, c := range hostCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		checkHost(t, data)
	})
}
