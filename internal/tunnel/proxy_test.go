package tunnel

import (
	"bytes"
	"crypto/rand"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/clock"
)

// sizedReader serves data in reads of at most chunk bytes and records the size of
// the buffer each Read is given.
type sizedReader struct {
	data  []byte
	chunk int
	sizes []int
}

func (r *sizedReader) Read(p []byte) (int, error) {
	r.sizes = append(r.sizes, len(p))
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.chunk)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// A copy moves to the large buffer once a read fills the small one (a bulk stream),
// keeps the small one for a connection whose reads never fill it, and copies every
// byte, counted, either way.
func TestCopyCountingGrowsItsBufferForABulkStream(t *testing.T) {
	data := make([]byte, 1<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		chunk     int
		wantLarge bool
	}{
		{"bulk", 1 << 30, true},
		{"requests", 1000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &sizedReader{data: data, chunk: tc.chunk}
			var dst bytes.Buffer
			var total atomic.Int64
			if err := copyCounting(&dst, src, byteCounters{&total}, nil); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst.Bytes(), data) {
				t.Fatalf("copied %d bytes, not the %d read", dst.Len(), len(data))
			}
			if total.Load() != int64(len(data)) {
				t.Fatalf("counted %d bytes, copied %d", total.Load(), len(data))
			}
			small, large := len(*smallCopyBuffers.New().(*[]byte)), len(*largeCopyBuffers.New().(*[]byte))
			if src.sizes[0] != small {
				t.Fatalf("first read into %d bytes, want the small buffer's %d", src.sizes[0], small)
			}
			last := src.sizes[len(src.sizes)-1]
			if tc.wantLarge && last != large {
				t.Fatalf("a bulk stream still reads into %d bytes, want the large buffer's %d", last, large)
			}
			if !tc.wantLarge && last != small {
				t.Fatalf("reads of %d bytes moved to a %d-byte buffer", tc.chunk, last)
			}
		})
	}
}

// The idle timeout's stamp on the bulk path: copyCounting of a bulk stream with and
// without an activity to stamp (two atomic loads per read).
func BenchmarkCopyCounting(b *testing.B) {
	const size = 64 << 20
	clk := clock.NewFake(time.Unix(0, 0))
	cutter := newIdleCutter(clk, time.Minute, func() {})
	defer cutter.stop()
	for _, bc := range []struct {
		name string
		seen *activity
	}{{"no idle timeout", nil}, {"idle timeout", &activity{cutter: cutter}}} {
		b.Run(bc.name, func(b *testing.B) {
			var total atomic.Int64
			b.SetBytes(size)
			for b.Loop() {
				src := &chunkReader{left: size, chunk: 16 << 10} // reads of a TCP socket's size
				if err := copyCounting(io.Discard, src, byteCounters{&total}, bc.seen); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// chunkReader serves left zero bytes in reads of at most chunk bytes.
type chunkReader struct{ left, chunk int }

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.chunk, r.left)
	r.left -= n
	return n, nil
}
