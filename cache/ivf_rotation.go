package cache

// rotation is a fixed pseudo-random rotation of R^n (n a power of two):
// three rounds of sign flips, each followed by a Walsh-Hadamard transform.
type rotation struct {
	n     int
	signs [3][]float32
}

func newRotation(n int) rotation {
	r := rotation{n: n}
	state := uint64(0x2545f4914f6cdd1d)
	for k := range r.signs {
		r.signs[k] = make([]float32, n)
		for i := range r.signs[k] {
			state ^= state << 13
			state ^= state >> 7
			state ^= state << 17
			r.signs[k][i] = float32(1 - 2*int(state&1))
		}
	}
	return r
}

// code writes the sign bits of the rotated vec (zero-padded to n) to dst,
// using buf (len n) as scratch.
func (r rotation) code(dst []uint64, vec []float32, buf []float32) {
	buf = buf[:r.n]
	copy(buf, vec)
	clear(buf[len(vec):])
	for _, sg := range r.signs {
		sg = sg[:len(buf)]
		for i := range buf {
			buf[i] *= sg[i]
		}
		fwht(buf)
	}
	clear(dst)
	for i, v := range buf {
		if v > 0 {
			dst[i/64] |= 1 << (i % 64)
		}
	}
}

// fwht is the in-place, unnormalised fast Walsh-Hadamard transform.
func fwht(a []float32) {
	h := 1
	if len(a)%8 == 0 { // the first three rounds at once, eight values at a time
		for i := 0; i+8 <= len(a); i += 8 {
			v := (*[8]float32)(a[i : i+8])
			a0, a1 := v[0]+v[1], v[0]-v[1]
			a2, a3 := v[2]+v[3], v[2]-v[3]
			a4, a5 := v[4]+v[5], v[4]-v[5]
			a6, a7 := v[6]+v[7], v[6]-v[7]
			b0, b1, b2, b3 := a0+a2, a1+a3, a0-a2, a1-a3
			b4, b5, b6, b7 := a4+a6, a5+a7, a4-a6, a5-a7
			v[0], v[1], v[2], v[3] = b0+b4, b1+b5, b2+b6, b3+b7
			v[4], v[5], v[6], v[7] = b0-b4, b1-b5, b2-b6, b3-b7
		}
		h = 8
	}
	for ; h < len(a); h *= 2 {
		for i := 0; i < len(a); i += 2 * h {
			x, y := a[i:i+h], a[i+h:i+2*h]
			y = y[:len(x)]
			for j := range x {
				x[j], y[j] = x[j]+y[j], x[j]-y[j]
			}
		}
	}
}
