package eventbatch

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/auditlens/auditlens/lib/bus"
)

// The codecs of a batch's payload, from github.com/klauspost/compress.

// Compress returns raw compressed with compression (CompressionS2, CompressionZstd; any
// other value: raw itself) as an exact-size copy, and scratch, grown as needed, for the next
// call. Finding batches (classify) use it as the events' batches do; the header
// HeaderEncoding tells a reader the compression (none when raw is returned).
func Compress(compression string, raw, scratch []byte) (out, _ []byte) {
	switch compression {
	case CompressionS2:
		return encodeS2(raw, scratch)
	case CompressionZstd:
		return encodeZstd(raw, scratch)
	}
	return raw, scratch
}

// Decompress returns the payload data sent with header h as it was before compression
// (data itself when HeaderEncoding is absent or none), decompressed into buf when it is
// large enough, and that buffer for the next call. A payload that does not decompress, has
// an unknown encoding or is larger than MaxBytesLimit once decompressed is ErrBad.
func Decompress(h map[string]string, data, buf []byte) (raw, _ []byte, err error) {
	switch enc := h[HeaderEncoding]; enc {
	case "", CompressionNone:
		return data, buf, nil
	case CompressionS2:
		if raw, err = decodeS2(data, buf); err != nil {
			return nil, buf, err
		}
	case CompressionZstd:
		if raw, err = decodeZstd(data, buf); err != nil {
			return nil, buf, err
		}
	default:
		return nil, buf, fmt.Errorf("%w: encoding %q", ErrBad, bus.Short(enc, 40))
	}
	return raw, raw, nil
}

// encodeS2 compresses raw in scratch (grown as needed, returned for reuse) and returns an
// exact-size copy: a message holds no more memory than its payload.
func encodeS2(raw, scratch []byte) (out, _ []byte) {
	if n := s2.MaxEncodedLen(len(raw)); cap(scratch) < n {
		scratch = make([]byte, n)
	}
	enc := s2.Encode(scratch[:cap(scratch)], raw)
	return append([]byte(nil), enc...), scratch
}

func decodeS2(data, buf []byte) ([]byte, error) {
	n, err := s2.DecodedLen(data)
	if err != nil {
		return nil, fmt.Errorf("%w: s2: %w", ErrBad, err)
	}
	if n > MaxBytesLimit {
		return nil, fmt.Errorf("%w: %d bytes once decompressed, more than %d", ErrBad, n, MaxBytesLimit)
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	out, err := s2.Decode(buf[:cap(buf)], data)
	if err != nil {
		return nil, fmt.Errorf("%w: s2: %w", ErrBad, err)
	}
	return out, nil
}

// One encoder and one decoder serve every goroutine: EncodeAll and DecodeAll are safe for
// concurrent use.
var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
)

func zstdCodecs() (*zstd.Encoder, *zstd.Decoder) {
	zstdOnce.Do(func() {
		var err error
		// The fastest level: batches are small and short-lived, CPU is what ingest saves.
		if zstdEnc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1)); err != nil {
			panic(fmt.Sprintf("zstd encoder: %v", err)) // only for invalid options
		}
		if zstdDec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxBytesLimit)); err != nil {
			panic(fmt.Sprintf("zstd decoder: %v", err))
		}
	})
	return zstdEnc, zstdDec
}

// encodeZstd is encodeS2 with zstd.
func encodeZstd(raw, scratch []byte) (out, _ []byte) {
	enc, _ := zstdCodecs()
	scratch = enc.EncodeAll(raw, scratch[:0])
	return append([]byte(nil), scratch...), scratch
}

func decodeZstd(data, buf []byte) ([]byte, error) {
	_, dec := zstdCodecs()
	if cap(buf) == 0 {
		buf = make([]byte, 0, 256<<10)
	}
	out, err := dec.DecodeAll(data, buf[:0])
	if err != nil {
		return nil, fmt.Errorf("%w: zstd: %w", ErrBad, err)
	}
	if len(out) > MaxBytesLimit {
		return nil, fmt.Errorf("%w: %d bytes once decompressed, more than %d", ErrBad, len(out), MaxBytesLimit)
	}
	return out, nil
}
