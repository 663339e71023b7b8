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
