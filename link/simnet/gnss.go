package simnet

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/mhistack/mhistack/link/nmea"
	"github.com/mhistack/mhistack/mhi/sim"
)

// GNSSConfig is the emulated GNSS receiver's fix.
type GNSSConfig struct {
	// Latitude and Longitude in degrees (south and west negative),
	// Altitude in metres above mean sea level (zero: 48.1173 N,
	// 11.5167 E, 545 m).
	Latitude, Longitude, Altitude float64
	// Satellites in view (default 8), all used in the fix.
	Satellites int
	// Interval between fixes (default 1 s, NMEA receivers' usual 1 Hz).
	Interval time.Duration
	// Now is the clock the sentences' UTC time and date come from
	// (default time.Now).
	Now func() time.Time
}

// GNSSFunction is the emulated modem's NMEA port: once per Interval it
// sends a GGA (fix), an RMC (recommended minimum) and the GSV sentences
// (satellites in view) of a receiver standing still at the configured
// position, talker GP, one transfer per sentence. Its goroutine runs from
// Start to Stop.
type GNSSFunction struct {
	cfg GNSSConfig

	mu   sync.Mutex
	quit chan struct{}
	done chan struct{}
}

// NewGNSSFunction returns an NMEA port with cfg's fix.
func NewGNSSFunction(cfg GNSSConfig) *GNSSFunction {
	if cfg.Latitude == 0 && cfg.Longitude == 0 {
		cfg.Latitude, cfg.Longitude, cfg.Altitude = 48.1173, 11.5167, 545
	}
	if cfg.Satellites <= 0 {
		cfg.Satellites = 8
	}
	cfg.Satellites = min(cfg.Satellites, 12) // GGA's two digits; GSV of 3 sentences
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &GNSSFunction{cfg: cfg}
}

// Start implements sim.Function.
func (g *GNSSFunction) Start(p *sim.Port) {
	g.mu.Lock()
	defer g.mu.Unlock()
	quit, done := make(chan struct{}), make(chan struct{})
	g.quit, g.done = quit, done
	go g.run(p, quit, done)
}

// Stop implements sim.Function: it ends the goroutine and waits for it.
func (g *GNSSFunction) Stop() {
	g.mu.Lock()
	quit, done := g.quit, g.done
	g.quit, g.done = nil, nil
	g.mu.Unlock()
	if quit != nil {
		close(quit)
		<-done
	}
}

// Receive implements sim.Function: the port takes no input.
func (g *GNSSFunction) Receive([]byte) {}

func (g *GNSSFunction) run(p *sim.Port, quit, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		for _, s := range g.Sentences(g.cfg.Now()) {
			select {
			case <-quit:
				return
			case <-p.Done():
				return
			default:
			}
			_ = p.Send([]byte(s))
		}
		select {
		case <-quit:
			return
		case <-p.Done():
			return
		case <-t.C:
		}
	}
}

// Sentences returns the sentences of one fix at time now.
func (g *GNSSFunction) Sentences(now time.Time) []string {
	c := &g.cfg
	now = now.UTC()
	hms := now.Format("150405") + fmt.Sprintf(".%02d", now.Nanosecond()/1e7)
	lat, ns := nmea.LatLon(c.Latitude, false)
	lon, ew := nmea.LatLon(c.Longitude, true)
	out := []string{
		// GGA: time, position, quality 1 (GPS fix), satellites, HDOP,
		// altitude and geoid separation (M), no DGPS.
		nmea.Format("GPGGA", hms, lat, ns, lon, ew, "1", fmt.Sprintf("%02d", c.Satellites), "0.9",
			fmt.Sprintf("%.1f", c.Altitude), "M", "46.9", "M", "", ""),
		// RMC: time, A (valid), position, 0 knots, no course, date, no
		// magnetic variation, mode A (autonomous).
		nmea.Format("GPRMC", hms, "A", lat, ns, lon, ew, "0.0", "", now.Format("020106"), "", "", "A"),
	}
	// GSV: four satellites a sentence, each PRN, elevation, azimuth,
	// SNR.
	total := (c.Satellites + 3) / 4
	for i := range total {
		f := []string{fmt.Sprint(total), fmt.Sprint(i + 1), fmt.Sprintf("%02d", c.Satellites)}
		for s := i * 4; s < min(c.Satellites, i*4+4); s++ {
			el := 15 + (s*37)%70
			az := (s * 47) % 360
			snr := 30 + int(10*math.Sin(float64(s)))
			f = append(f, fmt.Sprintf("%02d", s*3+2), fmt.Sprintf("%02d", el), fmt.Sprintf("%03d", az), fmt.Sprintf("%02d", snr))
		}
		out = append(out, nmea.Format("GPGSV", f...))
	}
	return out
}
