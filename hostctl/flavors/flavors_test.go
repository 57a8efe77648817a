package flavors_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

func TestRegistryBothStores(t *testing.T) {
	for name, st := range stores.Both(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			reg := &flavors.Registry{Store: st}
			f, err := reg.Create(ctx, flavors.Flavor{Name: "m1.enc", VCPUs: 2, RAM: 1024, Disk: 10, Ephemeral: 5, Swap: 512,
				ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "True", "hw:ephemeral_encryption_format": "luks", "custom:thing": "kept as given"}})
			if err != nil {
				t.Fatal(err)
			}
			if f.Version != 1 || f.Created.IsZero() {
				t.Fatalf("created = %+v", f)
			}
			if _, err := reg.Create(ctx, flavors.Flavor{Name: "m1.enc", VCPUs: 1, RAM: 1}); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("second create = %v, want a conflict", err)
			}
			if _, err := reg.Create(ctx, flavors.Flavor{Name: "m1.tiny", VCPUs: 1, RAM: 64}); err != nil {
				t.Fatal(err)
			}
			got, err := reg.Get(ctx, "m1.enc")
			if err != nil {
				t.Fatal(err)
			}
			if got.VCPUs != 2 || got.RAM != 1024 || got.Disk != 10 || got.Ephemeral != 5 || got.Swap != 512 ||
				got.ExtraSpecs["custom:thing"] != "kept as given" || got.ExtraSpecs["hw:ephemeral_encryption"] != "True" {
				t.Fatalf("get = %+v", got)
			}
			list, err := reg.List(ctx)
			if err != nil || len(list) != 2 || list[0].Name != "m1.enc" || list[1].Name != "m1.tiny" {
				t.Fatalf("list = %+v, %v", list, err)
			}
			// In use: refused, naming the instances; the flavor stays.
			err = reg.Delete(ctx, "m1.enc", func(context.Context) ([]string, error) { return []string{"web-1", "web-2"}, nil })
			if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "web-1, web-2") {
				t.Fatalf("delete in use = %v", err)
			}
			if _, err := reg.Get(ctx, "m1.enc"); err != nil {
				t.Fatalf("after refused delete: %v", err)
			}
			if err := reg.Delete(ctx, "m1.enc", func(context.Context) ([]string, error) { return nil, nil }); err != nil {
				t.Fatal(err)
			}
			if _, err := reg.Get(ctx, "m1.enc"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("after delete: %v", err)
			}
			if err := reg.Delete(ctx, "m1.enc", nil); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("delete again: %v", err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	ok := flavors.Flavor{Name: "m1.small", VCPUs: 1, RAM: 512, Disk: 1}
	tests := []struct {
		name  string
		edit  func(*flavors.Flavor)
		field string // "" = valid
		value string
	}{
		{"valid", func(*flavors.Flavor) {}, "", ""},
		{"unknown extra spec kept", func(f *flavors.Flavor) { f.ExtraSpecs = map[string]string{"quota:cpu_shares": "x y"} }, "", ""},
		{"bool yes", func(f *flavors.Flavor) { f.ExtraSpecs = map[string]string{"hw:ephemeral_encryption": "yes"} }, "", ""},
		{"bool 0", func(f *flavors.Flavor) { f.ExtraSpecs = map[string]string{"hw:ephemeral_encryption": "0"} }, "", ""},
		{"bool maybe", func(f *flavors.Flavor) { f.ExtraSpecs = map[string]string{"hw:ephemeral_encryption": "maybe"} }, "extra_specs[hw:ephemeral_encryption]", "maybe"},
		{"bad format", func(f *flavors.Flavor) { f.ExtraSpecs = map[string]string{"hw:ephemeral_encryption_format": "LUKS2"} }, "extra_specs[hw:ephemeral_encryption_format]", "LUKS2"},
		{"no name", func(f *flavors.Flavor) { f.Name = "" }, "name", ""},
		{"name with space", func(f *flavors.Flavor) { f.Name = "m1 small" }, "name", "m1 small"},
		{"name with slash", func(f *flavors.Flavor) { f.Name = "m1/small" }, "name", "m1/small"},
		{"zero vcpus", func(f *flavors.Flavor) { f.VCPUs = 0 }, "vcpus", "0"},
		{"zero ram", func(f *flavors.Flavor) { f.RAM = 0 }, "ram", "0"},
		{"negative disk", func(f *flavors.Flavor) { f.Disk = -1 }, "disk", "-1"},
		{"negative ephemeral", func(f *flavors.Flavor) { f.Ephemeral = -1 }, "ephemeral", "-1"},
		{"negative swap", func(f *flavors.Flavor) { f.Swap = -1 }, "swap", "-1"},
		{"control char in value", func(f *flavors.Flavor) { f.ExtraSpecs = map[string]string{"k": "a\nb"} }, "extra_specs[k]", "a\nb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := ok
			tc.edit(&f)
			err := flavors.Check(f)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var se *model.SpecError
			if !errors.As(err, &se) {
				t.Fatalf("Check = %v, want a field error on %s", err, tc.field)
			}
			for _, fe := range se.Errors {
				if fe.Field == tc.field && (tc.value == "" || strings.Contains(fe.Error(), tc.value) || strings.Contains(fe.Error(), strings.ReplaceAll(tc.value, "\n", `\n`))) {
					return
				}
			}
			t.Fatalf("Check = %v, want a field error on %s naming %q", err, tc.field, tc.value)
		})
	}
}
