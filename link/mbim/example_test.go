package mbim_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
)

// A data session against the emulated modem's MBIM function, here over a
// pipe; on a modem the client comes from mbim.DialMHI.
func ExampleNewSession() {
	modem := simnet.NewMBIMFunction(simnet.MBIMConfig{Network: simnet.NewNetwork(simnet.NetworkConfig{RadioOff: true})})
	host, dev := net.Pipe()
	go modem.Serve(dev)

	client := mbim.NewClient(mbim.NewStreamTransport(host), mbim.Options{})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	sess := mbim.NewSession(client, mbim.SessionConfig{
		APN:        "internet",
		OnProgress: func(p mbim.Progress) { fmt.Println(p.State) },
	})
	defer sess.Close(ctx)
	ip, err := sess.WaitUp(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ip.IPv4, ip.IPv4Gateway, ip.IPv4MTU)
	// Output:
	// opening
	// waiting-for-sim
	// radio-on
	// registering
	// attaching
	// connecting
	// configuring
	// connected
	// [10.0.0.2/30] 10.0.0.1 1500
	// closed
}
