package mbim

// LTE bands of downlink EARFCNs: BASE_STATIONS_INFO names the serving
// cell's channel, not its band. Ranges: 3GPP TS 36.101 Table 5.7.3-1
// (N_Offs-DL and the band's downlink EARFCN range).

// lteBands lists each band's first and last downlink EARFCN, in channel
// order.
var lteBands = [...]struct {
	band        int
	first, last uint32
}{
	{1, 0, 599}, {2, 600, 1199}, {3, 1200, 1949}, {4, 1950, 2399}, {5, 2400, 2649}, {6, 2650, 2749},
	{7, 2750, 3449}, {8, 3450, 3799}, {9, 3800, 4149}, {10, 4150, 4749}, {11, 4750, 4949},
	{12, 5010, 5179}, {13, 5180, 5279}, {14, 5280, 5379}, {17, 5730, 5849}, {18, 5850, 5999},
	{19, 6000, 6149}, {20, 6150, 6449}, {21, 6450, 6599}, {22, 6600, 7399}, {23, 7500, 7699},
	{24, 7700, 8039}, {25, 8040, 8689}, {26, 8690, 9039}, {27, 9040, 9209}, {28, 9210, 9659},
	{29, 9660, 9769}, {30, 9770, 9869}, {31, 9870, 9919}, {32, 9920, 10359},
	{33, 36000, 36199}, {34, 36200, 36349}, {35, 36350, 36949}, {36, 36950, 37549}, {37, 37550, 37749},
	{38, 37750, 38249}, {39, 38250, 38649}, {40, 38650, 39649}, {41, 39650, 41589}, {42, 41590, 43589},
	{43, 43590, 45589}, {46, 46790, 54539}, {48, 55240, 56739},
	{66, 66436, 67335}, {71, 68586, 68935},
}

// LTEBandOfEARFCN returns the LTE band of downlink channel earfcn; ok is
// false for a channel outside the bands listed.
func LTEBandOfEARFCN(earfcn uint32) (band int, ok bool) {
	for _, b := range lteBands {
		if earfcn >= b.first && earfcn <= b.last {
			return b.band, true
		}
	}
	return 0, false
}

// LTEEARFCNOfBand returns a downlink channel in the middle of LTE band
// band; ok is false for a band the table lacks.
func LTEEARFCNOfBand(band int) (earfcn uint32, ok bool) {
	for _, b := range lteBands {
		if b.band == band {
			return b.first + (b.last-b.first)/2, true
		}
	}
	return 0, false
}

// NR bands of downlink NR-ARFCNs, for BASE_STATIONS_INFO's NR serving
// cells. Each range is the band's downlink edges (3GPP TS 38.101-1 Table
// 5.2-1, TS 38.101-2 Table 5.2-1) converted by the global frequency
// raster of TS 38.104 §5.4.2.1 (5 kHz steps below 3 GHz, 15 kHz from
// 600000 up to 24.25 GHz, 60 kHz from 2016667). NR bands overlap (n78
// lies inside n77, n38 inside n41, n48 inside n77), so a channel alone
// does not always name its band: NRBandOfARFCN takes the narrowest band
// that holds the channel, which is the specific band a network built
// for it usually means (n78 rather than n77). Bands whose downlink range
// repeats another's exactly (n65 as n66, n90 as n41, the SDL/SUL
// variants n75, n76, n91 to n94) and the railway bands n100 and n101 are
// left out, so the rule never has to break a tie.
var nrBands = [...]struct {
	band        int
	first, last uint32
}{
	{1, 422000, 434000}, {2, 386000, 398000}, {3, 361000, 376000}, {5, 173800, 178800}, {7, 524000, 538000},
	{8, 185000, 192000}, {12, 145800, 149200}, {13, 149200, 151200}, {14, 151600, 153600}, {18, 172000, 175000},
	{20, 158200, 164200}, {24, 305000, 311800}, {25, 386000, 399000}, {26, 171800, 178800}, {28, 151600, 160600},
	{29, 143400, 145600}, {30, 470000, 472000}, {34, 402000, 405000}, {38, 514000, 524000}, {39, 376000, 384000},
	{40, 460000, 480000}, {41, 499200, 537999}, {46, 743334, 795000}, {48, 636667, 646666}, {50, 286400, 303400},
	{51, 285400, 286400}, {53, 496700, 499000}, {66, 422000, 440000}, {67, 147600, 151600}, {70, 399000, 404000},
	{71, 123400, 130400}, {74, 295000, 303600}, {77, 620000, 680000}, {78, 620000, 653333}, {79, 693334, 733333},
	{85, 145600, 149200}, {96, 795000, 875000}, {102, 795000, 828333}, {104, 828334, 875000},
	{257, 2054166, 2104165}, {258, 2016667, 2070832}, {259, 2270833, 2337499}, {260, 2229166, 2279165},
	{261, 2070833, 2084999}, {262, 2399166, 2415832},
}

// NRBandOfARFCN returns the NR band of downlink channel arfcn: the
// narrowest band of the table that holds it (the lower-numbered on equal
// widths); ok is false for a channel outside every band listed.
func NRBandOfARFCN(arfcn uint32) (band int, ok bool) {
	width := uint32(0)
	for _, b := range nrBands {
		if arfcn < b.first || arfcn > b.last {
			continue
		}
		if w := b.last - b.first; !ok || w < width {
			band, width, ok = b.band, w, true
		}
	}
	return band, ok
}

// NRARFCNOfBand returns a downlink channel of NR band band that
// NRBandOfARFCN maps back to band: the middle of the band, or, where a
// narrower band covers the middle (n77's holds n78), the channel nearest
// to it outside the narrower bands. ok is false for a band the table
// lacks or one that narrower bands cover entirely.
func NRARFCNOfBand(band int) (arfcn uint32, ok bool) {
	for _, b := range nrBands {
		if b.band != band {
			continue
		}
		mid := b.first + (b.last-b.first)/2
		cands := []uint32{mid}
		for _, o := range nrBands {
			cands = append(cands, o.first-1, o.last+1)
		}
		dist := func(c uint32) uint32 { return max(c, mid) - min(c, mid) }
		for _, c := range cands {
			if c < b.first || c > b.last {
				continue
			}
			if got, _ := NRBandOfARFCN(c); got == band && (!ok || dist(c) < dist(arfcn)) {
				arfcn, ok = c, true
			}
		}
		return arfcn, ok
	}
	return 0, false
}
