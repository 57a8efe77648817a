package metadata

import _ "embed" // treeDict

//go:generate go test -run ^TestTreeDict$ -update

// treeDict is the preset dictionary of the stored form of trees (see
// Encode): the end of the stream of the example instance's tree
// (testdata/golden) as it was when the dictionary was made. It is a
// committed file, never rendered at run time. `go generate` makes a new
// one (TestTreeDict -update), but stored trees depend on it byte for
// byte: a new dictionary needs a new magic, and DecodeTree must keep
// reading the old form with the old dictionary. TestTreeDict pins its
// hash.
//
//go:embed treedict.bin
var treeDict []byte

// treeDictWindow is how far back DEFLATE reaches: the most of a
// dictionary it uses.
const treeDictWindow = 32 << 10
