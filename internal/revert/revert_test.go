package revert

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestFailRunsNewestFirst(t *testing.T) {
	var order []string
	err := func() (err error) {
		r := New(nil, "change")
		defer r.Fail(&err)
		for _, s := range []string{"a", "b", "c"} {
			r.Add("undo "+s, func(context.Context) error { order = append(order, s); return nil })
		}
		return errors.New("step d failed")
	}()
	if err == nil || err.Error() != "step d failed" {
		t.Fatalf("err = %v", err)
	}
	if strings.Join(order, "") != "cba" {
		t.Fatalf("order = %v, want c b a", order)
	}
}

func TestSuccessSkipsUndo(t *testing.T) {
	ran := false
	r := New(nil, "change")
	r.Add("x", func(context.Context) error { ran = true; return nil })
	r.Success()
	var err error
	r.Fail(&err)
	if ran || err != nil {
		t.Fatalf("ran=%v err=%v", ran, err)
	}
}

func TestUndoErrorsJoined(t *testing.T) {
	cause := errors.New("define failed")
	undoErr := errors.New("rm: busy")
	err := func() (err error) {
		r := New(nil, "apply web-1")
		defer r.Fail(&err)
		r.Add("remove disk", func(context.Context) error { return undoErr })
		r.Add("ok step", func(context.Context) error { return nil })
		return cause
	}()
	if !errors.Is(err, cause) || !errors.Is(err, undoErr) || !strings.Contains(err.Error(), "remove disk") {
		t.Fatalf("err = %v", err)
	}
	// A failing undo with no error from the change still reports.
	var err2 error
	r := New(nil, "apply web-2")
	r.Add("remove disk", func(context.Context) error { return undoErr })
	r.Fail(&err2)
	if !errors.Is(err2, undoErr) || !strings.Contains(err2.Error(), "apply web-2 did not complete") {
		t.Fatalf("err2 = %v", err2)
	}
}

func TestUndoStepsGetLiveContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the request's context ended: undo must still run
	var got error
	r := New(nil, "c")
	r.Add("x", func(uctx context.Context) error { got = uctx.Err(); return nil })
	_ = ctx
	r.Fail(nil)
	if got != nil {
		t.Fatalf("undo context already done: %v", got)
	}
}

func TestCloneAndAdoptHandOver(t *testing.T) {
	var order []string
	mark := func(s string) func(context.Context) error {
		return func(context.Context) error { order = append(order, s); return nil }
	}
	callee := func() (*Reverter, error) {
		r := New(nil, "callee")
		var err error
		defer r.Fail(&err)
		r.Add("c1", mark("c1"))
		r.Add("c2", mark("c2"))
		undo := r.Clone()
		r.Success()
		return undo, nil
	}
	parent := New(nil, "parent")
	parent.Add("p1", mark("p1"))
	undo, err := callee()
	if err != nil || len(order) != 0 {
		t.Fatalf("callee undid on success: %v %v", order, err)
	}
	parent.Adopt(undo)
	parent.Add("p2", mark("p2"))
	if parent.Len() != 4 {
		t.Fatalf("Len = %d", parent.Len())
	}
	parent.Fail(nil)
	if strings.Join(order, ",") != "p2,c2,c1,p1" {
		t.Fatalf("order = %v", order)
	}
	undo.Fail(nil) // adopted: must not run twice
	if len(order) != 4 {
		t.Fatalf("adopted steps ran twice: %v", order)
	}
}
