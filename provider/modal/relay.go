package modal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	modalsdk "github.com/modal-labs/modal-client/go"
)

// A port given no tunnel at create is reached through an exec: bash inside the sandbox
// connects to 127.0.0.1:port (/dev/tcp) and relays the connection over the exec's
// stdin and stdout. Modal tunnels only the ports named at create, and its protocol has
// no other way in. The relay needs bash with /dev/tcp in the image (Debian's has it).
//
// relayScript: "ok" on stderr once connected (else bash's error and exit 1); the
// writer (stdin → socket) runs in the background with its stdout closed, and kills the
// reader when the client closes; the reader is the exec's process, so stdout ends when
// the sandbox's server closes.
const relayScript = `exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
echo ok >&2
{ cat >&3; kill $$; } <&0 >/dev/null 2>&1 &
exec cat <&3`

// relayPort connects to port inside sb through an exec relay (relayScript). The
// returned conn is one end of a net.Pipe (deadlines work); two goroutines copy between
// its other end and the exec, and end when either side closes.
func relayPort(ctx context.Context, sb *modalsdk.Sandbox, port int) (net.Conn, error) {
	proc, err := sb.Exec(ctx, []string{"bash", "-c", relayScript, "relay", strconv.Itoa(port)}, nil)
	if err != nil {
		return nil, err
	}
	stderr := bufio.NewReader(proc.Stderr)
	line, err := stderr.ReadString('\n')
	if strings.TrimSpace(line) != "ok" {
		rest, _ := io.ReadAll(io.LimitReader(stderr, 4096))
		proc.Stdin.Close()
		proc.Stdout.Close()
		code, werr := proc.Wait(ctx, nil)
		if werr == nil && err == nil {
			err = fmt.Errorf("exit code %d", code)
		}
		return nil, fmt.Errorf("connect to port %d inside the sandbox: %s (%w)", port, strings.TrimSpace(line+string(rest)), errors.Join(err, werr))
	}
	go io.Copy(io.Discard, stderr) // nothing more comes; ends with the exec
	ours, theirs := net.Pipe()
	go func() {
		io.Copy(theirs, proc.Stdout)
		theirs.Close()
		proc.Stdout.Close()
	}()
	go func() {
		io.Copy(proc.Stdin, theirs)
		proc.Stdin.Close()
	}()
	return ours, nil
}
