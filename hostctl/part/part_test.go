package part

import (
	"slices"
	"testing"
)

func TestAnswersMissing(t *testing.T) {
	all := Answers{}
	for _, op := range Ops() {
		all[op] = Answer{Do: Nothing}
	}
	if m := all.Missing(); len(m) != 0 {
		t.Fatalf("complete answers: missing %v", m)
	}
	cases := []struct {
		name string
		edit func(Answers)
		want []Op
	}{
		{"an operation left out", func(a Answers) { delete(a, Snapshot) }, []Op{Snapshot}},
		{"a refusal without a reason", func(a Answers) { a[Shelve] = Answer{Do: Refuse} }, []Op{Shelve}},
		{"the zero answer", func(a Answers) { a[Adopt] = Answer{} }, []Op{Adopt}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := Answers{}
			for k, v := range all {
				a[k] = v
			}
			tc.edit(a)
			if got := a.Missing(); !slices.Equal(got, tc.want) {
				t.Fatalf("Missing() = %v, want %v", got, tc.want)
			}
		})
	}
}
