package radio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// maxFileSize bounds a configuration or trace file read by Load.
const maxFileSize = 64 << 20

// Load returns a preset by name, or reads a configuration file (JSON, see
// ParseConfig) when name is not a preset's: whatever has a path
// separator or a ".json" ending is a file.
func Load(name string) (Config, error) {
	if c, err := Preset(name); err == nil {
		return c, nil
	} else if !isPath(name) {
		return Config{}, err
	}
	data, err := readBounded(name)
	if err != nil {
		return Config{}, err
	}
	dir := filepath.Dir(name)
	c, err := ParseConfig(data, func(p string) ([]byte, error) {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return readBounded(p)
	})
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	if c.Name == "" {
		c.Name = filepath.Base(name)
	}
	return c, nil
}

func isPath(s string) bool {
	return filepath.Ext(s) == ".json" || bytes.ContainsAny([]byte(s), `/\`)
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("radio: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("radio: %w", err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("radio: %s: larger than 64 MiB", path)
	}
	return b, nil
}

// fileConfig is the JSON form of a Config; a field left out keeps the
// base preset's value (times in milliseconds, rates in kbit/s).
type fileConfig struct {
	Name     string   `json:"name"`
	Base     string   `json:"base"`
	Seed     *uint64  `json:"seed"`
	Down     *fileDir `json:"down"`
	Up       *fileDir `json:"up"`
	Handover *struct {
		EveryMS   *float64 `json:"every_ms"`
		GapMS     *float64 `json:"gap_ms"`
		GapMaxMS  *float64 `json:"gap_max_ms"`
		DropQueue *bool    `json:"drop_queue"`
	} `json:"handover"`
	RRC *struct {
		IdleMS      *float64 `json:"idle_ms"`
		PromotionMS *float64 `json:"promotion_ms"`
	} `json:"rrc"`
}

type fileDir struct {
	RateKbps        *float64 `json:"rate_kbps"`
	Trace           *string  `json:"trace"`
	DelayMS         *float64 `json:"delay_ms"`
	JitterMS        *float64 `json:"jitter_ms"`
	QueueBytes      *int     `json:"queue_bytes"`
	QueuePackets    *int     `json:"queue_packets"`
	CoDel           *bool    `json:"codel"`
	CoDelTargetMS   *float64 `json:"codel_target_ms"`
	CoDelIntervalMS *float64 `json:"codel_interval_ms"`
	Loss            *float64 `json:"loss"`
	Reorder         *float64 `json:"reorder"`
	Burst           *struct {
		P        float64 `json:"p"`
		R        float64 `json:"r"`
		LossBad  float64 `json:"loss_bad"`
		LossGood float64 `json:"loss_good"`
	} `json:"burst"`
}

// ParseConfig reads a link configuration in JSON:
//
//	{"base": "lte", "seed": 7,
//	 "down": {"trace": "down.csv", "delay_ms": 20, "queue_packets": 400, "codel": true},
//	 "up":   {"rate_kbps": 5000, "loss": 0.001, "burst": {"p": 0.01, "r": 0.3, "loss_bad": 1}},
//	 "handover": {"every_ms": 5000, "gap_ms": 40, "drop_queue": true},
//	 "rrc": {"idle_ms": 10000, "promotion_ms": 800}}
//
// It starts from the preset named by base (none: an empty link) and
// replaces what the file sets. A direction's fields are rate_kbps,
// trace (a file for ParseTrace, read with readTrace), delay_ms,
// jitter_ms, queue_bytes, queue_packets, codel, codel_target_ms,
// codel_interval_ms, loss, reorder and burst (p, r, loss_bad,
// loss_good). Unknown fields are errors.
func ParseConfig(data []byte, readTrace func(path string) ([]byte, error)) (Config, error) {
	var f fileConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Config{}, fmt.Errorf("radio: config: %w", err)
	}
	var c Config
	if f.Base != "" {
		var err error
		if c, err = Preset(f.Base); err != nil {
			return Config{}, err
		}
	}
	// A file is its own link, not its base preset: Load names it after
	// the file unless it says "name".
	c.Name = f.Name
	if f.Seed != nil {
		c.Seed = *f.Seed
	}
	for _, d := range []struct {
		f *fileDir
		c *Direction
	}{{f.Down, &c.Down}, {f.Up, &c.Up}} {
		if d.f == nil {
			continue
		}
		if err := d.f.apply(d.c, readTrace); err != nil {
			return Config{}, err
		}
	}
	if h := f.Handover; h != nil {
		setMS(&c.Handover.Every, h.EveryMS)
		setMS(&c.Handover.Gap, h.GapMS)
		setMS(&c.Handover.GapMax, h.GapMaxMS)
		if h.DropQueue != nil {
			c.Handover.DropQueue = *h.DropQueue
		}
	}
	if r := f.RRC; r != nil {
		setMS(&c.RRC.Idle, r.IdleMS)
		setMS(&c.RRC.Promotion, r.PromotionMS)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// maxFileMS bounds a time in a configuration file (a day).
const maxFileMS = 24 * 3600 * 1000

func setMS(d *time.Duration, v *float64) {
	if v != nil {
		// Out of range values become -1 ns, which Validate refuses.
		if !(*v >= 0 && *v <= maxFileMS) {
			*d = -1
			return
		}
		*d = time.Duration(*v * float64(time.Millisecond))
	}
}

func (f *fileDir) apply(d *Direction, readTrace func(string) ([]byte, error)) error {
	if f.RateKbps != nil {
		if !(*f.RateKbps >= 0 && *f.RateKbps*1000 <= maxTraceRate) {
			return errors.New("radio: config: rate_kbps out of range")
		}
		d.Rate, d.Trace = int64(*f.RateKbps*1000), nil
	}
	if f.Trace != nil {
		if readTrace == nil {
			return errors.New("radio: config: a trace file cannot be read here")
		}
		b, err := readTrace(*f.Trace)
		if err != nil {
			return err
		}
		if d.Trace, err = ParseTrace(b); err != nil {
			return fmt.Errorf("%s: %w", *f.Trace, err)
		}
	}
	setMS(&d.Delay, f.DelayMS)
	setMS(&d.Jitter, f.JitterMS)
	if f.QueueBytes != nil {
		d.Queue.Bytes = *f.QueueBytes
	}
	if f.QueuePackets != nil {
		d.Queue.Packets = *f.QueuePackets
	}
	if f.CoDel != nil {
		d.Queue.CoDel = *f.CoDel
	}
	setMS(&d.Queue.Target, f.CoDelTargetMS)
	setMS(&d.Queue.Interval, f.CoDelIntervalMS)
	if f.Loss != nil {
		d.Loss = *f.Loss
	}
	if f.Reorder != nil {
		d.Reorder = *f.Reorder
	}
	if b := f.Burst; b != nil {
		d.Burst = GilbertElliott{P: b.P, R: b.R, LossBad: b.LossBad, LossGood: b.LossGood}
	}
	return nil
}
