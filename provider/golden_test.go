package provider

import "flag"

// update rewrites the golden files under testdata/ (testutil.Golden).
var update = flag.Bool("update", false, "rewrite the golden files under testdata/")
