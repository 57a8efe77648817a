package catalog_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/internal/store"
)

// instanceRecords are store records of instances (store.Instances'
// listing).
type instanceRecords []store.Instance

func (r instanceRecords) Instances(context.Context) ([]store.Instance, error) { return r, nil }

// shelvedUsers is the states part's listing of the shelved instances
// whose root disk an image is.
type shelvedUsers map[string][]string

func (s shelvedUsers) ImageUsers(_ context.Context, name string) ([]string, error) {
	return s[name], nil
}

// TestStoreUsers: a flavor is used by the instances of every host that
// name it; an image by this host's (a record of no host is this host's)
// and the shelved instances the states part names; a spec that cannot be
// decoded is an error naming the instance.
func TestStoreUsers(t *testing.T) {
	ctx := context.Background()
	rec := func(name, host, spec string) store.Instance {
		return store.Instance{Name: name, Host: host, Spec: []byte(spec)}
	}
	recs := instanceRecords{
		rec("a1", "host-a", `{"name":"a1","flavor":"small","image":"deb"}`),
		rec("b1", "host-b", `{"name":"b1","flavor":"small","image":"deb"}`),
		rec("old", "", `{"name":"old","image":"deb"}`),
		rec("a2", "host-a", `{"name":"a2","flavor":"large","image":"alpine"}`),
	}
	u := catalog.StoreUsers{Instances: recs, Host: "host-a", States: shelvedUsers{"deb": {"shelved-1"}}}
	for _, tc := range []struct {
		what string
		got  func() ([]string, error)
		want []string
	}{
		{"flavor small", func() ([]string, error) { return u.FlavorUsers(ctx, "small") }, []string{"a1", "b1"}},
		{"flavor tiny", func() ([]string, error) { return u.FlavorUsers(ctx, "tiny") }, nil},
		{"image deb", func() ([]string, error) { return u.ImageUsers(ctx, "deb") }, []string{"a1", "old", "shelved-1"}},
		{"image alpine", func() ([]string, error) { return u.ImageUsers(ctx, "alpine") }, []string{"a2"}},
	} {
		got, err := tc.got()
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: users %q, %v; want %q", tc.what, got, err, tc.want)
		}
	}
	// Without a states part and without hosts, every record counts.
	plain := catalog.StoreUsers{Instances: recs}
	if got, err := plain.ImageUsers(ctx, "deb"); err != nil || !slices.Equal(got, []string{"a1", "b1", "old"}) {
		t.Errorf("image deb without hosts: %q, %v", got, err)
	}
	bad := catalog.StoreUsers{Instances: append(recs, rec("broken", "host-a", `{`))}
	if _, err := bad.FlavorUsers(ctx, "small"); err == nil || !strings.Contains(err.Error(), "instance broken") {
		t.Errorf("undecodable spec: %v, want an error naming instance broken", err)
	}
}
