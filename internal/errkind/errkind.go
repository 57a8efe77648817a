// Package errkind classifies errors by kind — not found, conflict,
// invalid, forbidden, unavailable … — so that code far from where an
// error was made (the admin API's status mapper, a client across the
// wire) can tell what kind of failure it is with errors.Is, through any
// amount of %w wrapping:
//
//	var ErrNotFound = errkind.New(errkind.NotFound, "not found") // a package's sentinel
//	err := fmt.Errorf("flavor %q: %w", name, ErrNotFound)
//	errors.Is(err, ErrNotFound)      // true: the sentinel is still itself
//	errors.Is(err, errkind.NotFound) // true: and it carries its kind
//	errkind.Of(err)                  // errkind.NotFound
//
// A package declares its sentinels with New, marks an error made
// elsewhere with Mark, or makes a one-off error with Errorf. The kinds
// say nothing of HTTP: hostctl/api maps them to status codes and its
// client maps status codes back to them.
//
// errkind is a leaf: it imports only the standard library, so that every
// package (the wire client too) may import it.
package errkind

import "fmt"

// Kind is a kind of failure. A Kind is itself an error, the target of
// errors.Is; the zero Kind is no kind (an unclassified, internal error).
type Kind uint8

// The kinds.
const (
	// Invalid: the request is malformed or breaks a rule; repeating it
	// fails the same way (HTTP 400).
	Invalid Kind = iota + 1
	// Unauthenticated: the caller did not say who it is (401).
	Unauthenticated
	// Forbidden: the caller may not do this (403).
	Forbidden
	// NotFound: what the request names does not exist (404).
	NotFound
	// Conflict: the request clashes with the current state (a name taken,
	// an instance in the wrong state, a resource in use) (409).
	Conflict
	// TooLarge: the request is larger than allowed (413).
	TooLarge
	// Unsupported: this daemon does not offer what was asked (no
	// hypervisor, no key manager) (501).
	Unsupported
	// Unavailable: a service the request needs is unreachable for now;
	// repeating it later may succeed (503).
	Unavailable

	maxKind = Unavailable
)

var names = [...]string{
	Invalid:         "invalid",
	Unauthenticated: "unauthenticated",
	Forbidden:       "forbidden",
	NotFound:        "not found",
	Conflict:        "conflict",
	TooLarge:        "too large",
	Unsupported:     "unsupported",
	Unavailable:     "unavailable",
}

// All returns every kind, in their order.
func All() []Kind {
	out := make([]Kind, 0, maxKind)
	for k := Invalid; k <= maxKind; k++ {
		out = append(out, k)
	}
	return out
}

// String names the kind ("not found"); the zero Kind is "".
func (k Kind) String() string {
	if k == 0 || k > maxKind {
		return ""
	}
	return names[k]
}

// Error is the kind's name, so that a Kind is an error: the target of
// errors.Is(err, errkind.NotFound).
func (k Kind) Error() string { return k.String() }

// kinded is an error of a kind with its own message: a sentinel made by
// New, or an error marked by Mark or made by Errorf (wrapped then).
type kinded struct {
	kind    Kind
	msg     string
	wrapped error // nil for a sentinel
}

func (e *kinded) Error() string {
	if e.msg == "" && e.wrapped != nil {
		return e.wrapped.Error()
	}
	return e.msg
}

// Is reports whether target is e's kind (e itself errors.Is already
// compares).
func (e *kinded) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == e.kind
}

func (e *kinded) Unwrap() error { return e.wrapped }

// New returns a sentinel error of kind k with message msg: each call a
// distinct error (errors.Is(err, sentinel) holds only for itself), each
// of kind k (errors.Is(err, k) holds too).
func New(k Kind, msg string) error {
	return &kinded{kind: k, msg: msg}
}

// Mark returns err marked with kind k: its message and its chain
// unchanged (errors.Is and errors.As see through it), errors.Is(…, k)
// true and Of the outer kind k. Mark of nil is nil.
func Mark(err error, k Kind) error {
	if err == nil {
		return nil
	}
	return &kinded{kind: k, wrapped: err}
}

// Errorf formats as fmt.Errorf (%w wraps) and marks the result with k.
func Errorf(k Kind, format string, args ...any) error {
	return Mark(fmt.Errorf(format, args...), k)
}

// Of returns the kind of err: the first kind found walking its chain
// outermost first (depth first through errors.Join and multiple %w, in
// their order), as errors.As would find it; 0 when it has none. An error
// that classifies itself with an Is method (for instance one that
// reports being a sentinel of a kind) is asked for each kind in turn.
func Of(err error) Kind {
	if err == nil {
		return 0
	}
	return kindOf(err)
}

// kindOf is Of on one link of a chain. It inspects each link itself, as
// errors.Is does, so it takes the link as an any: errorlint asks code
// that type-switches on an error to call errors.Is or errors.As instead,
// and neither tells which kind comes first.
func kindOf(link any) Kind {
	for link != nil {
		switch x := link.(type) {
		case Kind:
			return x
		case *kinded:
			return x.kind
		case interface{ Is(error) bool }:
			for _, k := range All() {
				if x.Is(k) {
					return k
				}
			}
		}
		switch x := link.(type) {
		case interface{ Unwrap() error }:
			link = x.Unwrap() // a nil error is a nil any: the loop ends
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				if k := Of(e); k != 0 {
					return k
				}
			}
			return 0
		default:
			return 0
		}
	}
	return 0
}
