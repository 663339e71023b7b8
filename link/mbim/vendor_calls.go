package mbim

import "context"

// QMI sends a QMUX frame through the QMI service and returns the reply
// frame (the caller encodes and decodes QMI: package link/qmi).
func (c *Client) QMI(ctx context.Context, frame []byte) ([]byte, error) {
	return c.Command(ctx, ServiceQMI, CIDQMIMsg, Set, frame)
}

// QuectelRadioState queries the Quectel service's RADIO_STATE.
func (c *Client) QuectelRadioState(ctx context.Context) (QuectelRadioState, error) {
	b, err := c.Command(ctx, ServiceQuectel, CIDQuectelRadioState, Query, nil)
	if err != nil {
		return 0, err
	}
	return ParseQuectelRadioState(b)
}

// SetQuectelRadioState sets the Quectel service's RADIO_STATE (on: the
// FCC unlock).
func (c *Client) SetQuectelRadioState(ctx context.Context, s QuectelRadioState) (QuectelRadioState, error) {
	b, err := c.Command(ctx, ServiceQuectel, CIDQuectelRadioState, Set, EncodeQuectelRadioState(s))
	if err != nil {
		return 0, err
	}
	return ParseQuectelRadioState(b)
}
