package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/klauspost/compress/s2"
)

// encodePayload marshals e behind a header byte, s2-compressed when large.
func encodePayload(e *Entry) ([]byte, error) {
	raw, err := e.Marshal()
	if err != nil {
		return nil, err
	}
	if len(raw) > compressMin {
		buf := make([]byte, 1+s2.MaxEncodedLen(len(raw)))
		if z := s2.Encode(buf[1:], raw); len(z) < len(raw) {
			buf[0] = payloadS2
			return buf[:1+len(z)], nil
		}
	}
	out := make([]byte, 1+len(raw))
	out[0] = payloadRaw
	copy(out[1:], raw)
	return out, nil
}

// decodePayload reverses encodePayload. Its errors never quote the content.
func decodePayload(b []byte) (*Entry, error) {
	if len(b) == 0 {
		return nil, errors.New("empty payload")
	}
	body := b[1:]
	switch b[0] {
	case payloadRaw:
	case payloadS2:
		n, err := s2.DecodedLen(body)
		if err != nil || n > maxPayloadLen {
			return nil, errors.New("corrupt compressed payload")
		}
		if body, err = s2.Decode(make([]byte, n), body); err != nil {
			return nil, errors.New("corrupt compressed payload")
		}
	default:
		return nil, fmt.Errorf("unknown payload encoding %d", b[0])
	}
	e, err := UnmarshalEntry(body)
	if err != nil {
		return nil, errors.New("corrupt payload: not an entry")
	}
	return e, nil
}

// encodeRef packs a namespace and an exact key: uvarint len(ns), ns, key.
func encodeRef(ns, key string) []byte {
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(ns)+len(key)), uint64(len(ns)))
	return append(append(b, ns...), key...)
}

func decodeRef(b []byte) (ns, key string) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return "", ""
	}
	return string(b[w : w+int(n)]), string(b[w+int(n):])
}

// vecBytes encodes v as little-endian float32s, the layout RediSearch reads.
func vecBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func bytesVec(b []byte, dims int) ([]float32, bool) {
	if len(b) != 4*dims {
		return nil, false
	}
	v := make([]float32, dims)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, true
}
