package mbim

import (
	"context"
	"fmt"
)

// MBIMEx returns the MBIMEx version in use since the function was last
// opened: the one NegotiateMBIMEx (or a proxy client's VERSION exchange)
// agreed, else the one a proxy reported, else MBIMEx1 (the MBIM 1.0
// layouts).
func (c *Client) MBIMEx() Version {
	c.conn.Mu.Lock()
	defer c.conn.Mu.Unlock()
	return c.mbimExLocked()
}

func (c *Client) mbimExLocked() Version {
	switch {
	case c.exOpen == c.opens && c.ex != 0:
		return c.ex
	case c.proxyEx != 0:
		return c.proxyEx
	}
	return MBIMEx1
}

// NegotiateMBIMEx asks the function for MBIMEx 3.0 as Windows and
// ModemManager do right after OPEN: DEVICE_SERVICES must list
// MS_BASIC_CONNECT_EXTENSIONS with VERSION, then VERSION {1.0, 3.0} is
// answered with the version the function will use (1.0, 2.0 or 3.0).
// From 2.0 on REGISTER_STATE, PACKET_SERVICE and SIGNAL_STATE come in
// their 2.0 layouts (longer; SignalState decodes the RSRP/SNR part);
// from 3.0 on SUBSCRIBER_READY_STATUS, PACKET_SERVICE, CONNECT and
// BASE_STATIONS_INFO in their 3.0 ones, which the Client's calls and
// Session follow. A function
// without the extension keeps MBIM 1.0: the result is MBIMEx1 and no
// error. The answer holds until the function is opened again, so calling
// it once per open is enough; later calls return the agreed version at
// once. Subscribers see the outcome as a PROXY_CONTROL VERSION
// indication, which a Proxy passes to its libmbim clients so that they
// parse the same layouts.
func (c *Client) NegotiateMBIMEx(ctx context.Context) (Version, error) {
	c.exMu.Lock()
	defer c.exMu.Unlock()
	c.conn.Mu.Lock()
	open, done := c.opens, c.exOpen == c.opens && c.ex != 0
	v := c.mbimExLocked()
	c.conn.Mu.Unlock()
	if done {
		return v, nil
	}
	agreed, err := c.negotiate(ctx)
	if err != nil {
		return MBIMEx1, err
	}
	if !c.agreed(open, agreed) {
		return MBIMEx1, fmt.Errorf("mbim: MBIMEx negotiation: the function was reopened meanwhile")
	}
	return agreed, nil
}

// agreed records version v as agreed during open number open (false if
// the function has been opened again since) and announces it.
func (c *Client) agreed(open uint64, v Version) bool {
	c.conn.Mu.Lock()
	stale := c.opens != open
	if !stale {
		c.exOpen, c.ex = open, v
	}
	c.conn.Mu.Unlock()
	if stale {
		return false
	}
	vi := VersionInfo{MBIM: MBIMVersion1, Extended: v}
	c.announce(&Message{Service: ServiceProxyControl, CID: CIDProxyVersion, Buffer: vi.Encode()})
	return true
}

// sawVersionAnswer records the outcome of a VERSION exchange another
// user of the client (a proxy client) made.
func (c *Client) sawVersionAnswer(answer []byte) {
	v, err := ParseVersionInfo(answer)
	if err != nil {
		return
	}
	c.conn.Mu.Lock()
	open := c.opens
	c.conn.Mu.Unlock()
	c.agreed(open, v.Extended)
}

func (c *Client) negotiate(ctx context.Context) (Version, error) {
	ds, err := c.DeviceServices(ctx)
	if err != nil {
		return MBIMEx1, err
	}
	if !ds.Supports(ServiceMSBasicConnectExtensions, CIDMSVersion) {
		return MBIMEx1, nil
	}
	q := VersionInfo{MBIM: MBIMVersion1, Extended: MBIMEx3}
	b, err := c.Command(ctx, ServiceMSBasicConnectExtensions, CIDMSVersion, Query, q.Encode())
	if err != nil {
		return MBIMEx1, err
	}
	v, err := ParseVersionInfo(b)
	if err != nil {
		return MBIMEx1, err
	}
	switch v.Extended {
	case MBIMEx1, MBIMEx2, MBIMEx3:
		return v.Extended, nil
	}
	// A function that picks a version the host did not offer breaks
	// the exchange; its layouts are unknown from here on.
	return MBIMEx1, fmt.Errorf("mbim: MBIMEx negotiation: function chose version %#04x, host offered %#04x: %w",
		uint16(v.Extended), uint16(q.Extended), ErrMalformed)
}

// SignalState queries SIGNAL_STATE in the layout agreed (MBIMEx): with
// MBIMEx 2.0 the answer carries RSRP and SNR per RAT.
func (c *Client) SignalState(ctx context.Context) (SignalState, error) {
	b, err := c.basic(ctx, CIDSignalState, Query, nil)
	if err != nil {
		return SignalState{}, err
	}
	if c.MBIMEx() >= MBIMEx2 {
		return ParseSignalStateV2(b)
	}
	return ParseSignalState(b)
}

// BaseStationsInfo queries MS BASE_STATIONS_INFO for the serving cells
// (no neighbours asked for), in the layout agreed (MBIMEx): with MBIMEx
// 3.0 the answer carries the NR serving cells. A function without the
// command answers NO_DEVICE_SUPPORT.
func (c *Client) BaseStationsInfo(ctx context.Context) (BaseStationsInfo, error) {
	v3 := c.MBIMEx() >= MBIMEx3
	q := (&BaseStationsQuery{}).Encode()
	if v3 {
		q = (&BaseStationsQuery{}).EncodeV3()
	}
	b, err := c.Command(ctx, ServiceMSBasicConnectExtensions, CIDMSBaseStationsInfo, Query, q)
	if err != nil {
		return BaseStationsInfo{}, err
	}
	if v3 {
		return ParseBaseStationsInfoV3(b)
	}
	return ParseBaseStationsInfo(b)
}
