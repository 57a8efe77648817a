package errkind_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vmeta/vmeta/internal/errkind"
)

// selfClassified reports being a sentinel through an Is method, as
// model.SpecError does.
type selfClassified struct{ sentinel error }

func (e selfClassified) Error() string        { return "self" }
func (e selfClassified) Is(target error) bool { return errors.Is(e.sentinel, target) }

func TestKinds(t *testing.T) {
	errNotFound := errkind.New(errkind.NotFound, "not found")
	errOther := errkind.New(errkind.NotFound, "not found")
	errConflict := errkind.New(errkind.Conflict, "conflict")
	plain := errors.New("plain")
	tests := []struct {
		name string
		err  error
		kind errkind.Kind
		is   []error // errors.Is holds for each
		not  []error // and not for these
		msg  string
	}{
		{"sentinel", errNotFound, errkind.NotFound, []error{errNotFound, errkind.NotFound}, []error{errOther, errkind.Conflict}, "not found"},
		{"wrapped sentinel", fmt.Errorf("flavor %q: %w", "f1", errNotFound), errkind.NotFound,
			[]error{errNotFound, errkind.NotFound}, []error{errOther, errConflict, errkind.Invalid}, `flavor "f1": not found`},
		{"twice wrapped", fmt.Errorf("show: %w", fmt.Errorf("flavor: %w", errConflict)), errkind.Conflict,
			[]error{errConflict, errkind.Conflict}, []error{errkind.NotFound}, "show: flavor: conflict"},
		{"marked", errkind.Mark(plain, errkind.Unavailable), errkind.Unavailable, []error{plain, errkind.Unavailable}, []error{errkind.Conflict}, "plain"},
		{"errorf", errkind.Errorf(errkind.Invalid, "format %q: must be iso9660", "udf"), errkind.Invalid, []error{errkind.Invalid}, nil, `format "udf": must be iso9660`},
		{"errorf wraps", errkind.Errorf(errkind.Forbidden, "share: %w", errNotFound), errkind.Forbidden,
			[]error{errkind.Forbidden, errNotFound, errkind.NotFound}, nil, "share: not found"},
		// The outermost kind is the error's kind.
		{"first of two %w", fmt.Errorf("%w: %w", errConflict, errNotFound), errkind.Conflict, []error{errkind.Conflict, errkind.NotFound}, nil, "conflict: not found"},
		{"joined", errors.Join(plain, errNotFound), errkind.NotFound, []error{errkind.NotFound}, []error{errkind.Conflict}, "plain\nnot found"},
		{"self-classified", fmt.Errorf("spec: %w", selfClassified{errConflict}), errkind.Conflict, []error{errkind.Conflict}, nil, "spec: self"},
		{"a kind itself", fmt.Errorf("x: %w", errkind.TooLarge), errkind.TooLarge, []error{errkind.TooLarge}, nil, "x: too large"},
		{"no kind", fmt.Errorf("x: %w", plain), 0, []error{plain}, errKinds(), "x: plain"},
		{"nil", nil, 0, nil, errKinds(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errkind.Of(tt.err); got != tt.kind {
				t.Errorf("Of = %q, want %q", got, tt.kind)
			}
			for _, target := range tt.is {
				if !errors.Is(tt.err, target) {
					t.Errorf("errors.Is(%v, %v) = false", tt.err, target)
				}
			}
			for _, target := range tt.not {
				if errors.Is(tt.err, target) {
					t.Errorf("errors.Is(%v, %v) = true", tt.err, target)
				}
			}
			if tt.err != nil && tt.err.Error() != tt.msg {
				t.Errorf("message %q, want %q", tt.err.Error(), tt.msg)
			}
		})
	}
	if errkind.Mark(nil, errkind.Conflict) != nil {
		t.Error("Mark(nil) != nil")
	}
	// errors.As sees through a mark.
	var pe *parseError
	if !errors.As(errkind.Mark(&parseError{"x"}, errkind.Invalid), &pe) || pe.s != "x" {
		t.Error("errors.As does not see through Mark")
	}
}

type parseError struct{ s string }

func (e *parseError) Error() string { return e.s }

func errKinds() []error {
	var out []error
	for _, k := range errkind.All() {
		out = append(out, k)
	}
	return out
}

func TestKindNames(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range errkind.All() {
		if k.String() == "" || seen[k.String()] {
			t.Errorf("kind %d: name %q empty or repeated", k, k)
		}
		seen[k.String()] = true
	}
	if len(seen) != 8 || errkind.Kind(0).String() != "" || errkind.Kind(200).String() != "" {
		t.Errorf("kinds %v", seen)
	}
}
