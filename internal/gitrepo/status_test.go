package gitrepo

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

func TestParseStatus(t *testing.T) {
	const h = "N... 100644 100644 100644 3b18e512dba79e4c8300dd08aeb37f8e728b8dad 3b18e512dba79e4c8300dd08aeb37f8e728b8dad"
	tests := []struct {
		name    string
		in      string
		want    apitype.GitStatusResponse
		wantErr bool
	}{
		{
			name: "empty",
			in:   "",
			want: apitype.GitStatusResponse{Files: []apitype.GitFile{}},
		},
		{
			name: "clean branch with upstream",
			in:   "# branch.oid abc\x00# branch.head main\x00# branch.upstream origin/main\x00# branch.ab +2 -3\x00",
			want: apitype.GitStatusResponse{Branch: "main", Ahead: 2, Behind: 3, Files: []apitype.GitFile{}},
		},
		{
			name: "initial commit and detached",
			in:   "# branch.oid (initial)\x00# branch.head (detached)\x00",
			want: apitype.GitStatusResponse{Branch: "(detached)", Files: []apitype.GitFile{}},
		},
		{
			name: "every kind of entry",
			in: "# branch.head feature/x\x00" +
				"1 .M " + h + " a.txt\x00" +
				"1 A. " + h + " new file.txt\x00" +
				"1 D. " + h + " gone\x00" +
				"2 R. " + h + " R100 renamed to.txt\x00renamed from.txt\x00" +
				"u UU N... 100644 100644 100644 100644 h1 h2 h3 conflict.go\x00" +
				"? untracked dir/\x00" +
				"! ignored.log\x00",
			want: apitype.GitStatusResponse{Branch: "feature/x", Files: []apitype.GitFile{
				{Status: ".M", Path: "a.txt"},
				{Status: "A.", Path: "new file.txt"},
				{Status: "D.", Path: "gone"},
				{Status: "R.", Path: "renamed to.txt"},
				{Status: "UU", Path: "conflict.go"},
				{Status: "?", Path: "untracked dir/"},
			}},
		},
		{
			name: "paths with tab, newline, non-ASCII and leading space",
			in: "1 .M " + h + " tab\there\x00" +
				"? line\nbreak\x00" +
				"? 日本語 ファイル.md\x00" +
				"1 M. " + h + "  leading space\x00",
			want: apitype.GitStatusResponse{Files: []apitype.GitFile{
				{Status: ".M", Path: "tab\there"},
				{Status: "?", Path: "line\nbreak"},
				{Status: "?", Path: "日本語 ファイル.md"},
				{Status: "M.", Path: " leading space"},
			}},
		},
		{
			name: "rename whose original looks like an entry",
			in:   "2 R. " + h + " R90 new\x00? not an entry\x00",
			want: apitype.GitStatusResponse{Files: []apitype.GitFile{{Status: "R.", Path: "new"}}},
		},
		{
			name: "no final NUL",
			in:   "? a",
			want: apitype.GitStatusResponse{Files: []apitype.GitFile{{Status: "?", Path: "a"}}},
		},
		{name: "rename without original", in: "2 R. " + h + " R100 new\x00", wantErr: true},
		{name: "short ordinary entry", in: "1 .M N... 100644\x00", wantErr: true},
		{name: "bad XY", in: "1 M " + h + " a\x00", wantErr: true},
		{name: "empty untracked", in: "? \x00", wantErr: true},
		{name: "bad ahead", in: "# branch.ab +x -1\x00", wantErr: true},
		{name: "negative behind", in: "# branch.ab +1 --1\x00", wantErr: true},
		{name: "empty entry", in: "\x00\x00", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatus([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseStatus(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseStatus(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// FuzzParseStatus: any input parses or fails cleanly, and every parsed file has
// a status and a path.
func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("# branch.oid abc\x00# branch.head main\x00# branch.ab +1 -0\x00"))
	f.Add([]byte("1 .M N... 100644 100644 100644 a b c d\x00? e f\x00"))
	f.Add([]byte("2 R. N... 100644 100644 100644 a b R100 new\x00old\x00"))
	f.Add([]byte("u UU N... 1 2 3 4 a b c x\x00! ign\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		st, err := ParseStatus(in)
		if err != nil {
			return
		}
		if st.Files == nil {
			t.Fatalf("ParseStatus(%q).Files = nil, want a non-nil slice", in)
		}
		for _, f := range st.Files {
			if f.Path == "" || (f.Status != "?" && len(f.Status) != 2) {
				t.Fatalf("ParseStatus(%q) gave file %+v", in, f)
			}
			if strings.ContainsRune(f.Path, 0) {
				t.Fatalf("ParseStatus(%q) gave a path with NUL: %q", in, f.Path)
			}
		}
	})
}
