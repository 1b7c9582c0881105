package gpufit

import "testing"

func benchNode() *Node {
	return mkNode("G2", 48000, 200000).gpu(1000, 530, 190, 1000, 0, 470, 1000, 60).obj()
}

func benchTarget() TargetWorkload {
	var shapes []Shape
	for i := 0; i < 40; i++ {
		s := Shape{CPUMilli: int64(1000 + 500*i), MemMiB: int64(1024 * (i%7 + 1)), Weight: float64(1 + i%5)}
		switch i % 4 {
		case 1:
			s.GPUs, s.Milli = 1, int32(100+20*i)
		case 2, 3:
			s.GPUs, s.Milli = int32(1+i%3), 1000
		}
		shapes = append(shapes, s)
	}
	return NewTargetWorkload(shapes)
}

func BenchmarkFits(b *testing.B) {
	n, r := benchNode(), Request{CPUMilli: 4000, MemMiB: 8192, GPUs: 2, Milli: 1000}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if !Fits(n, &r) {
			b.Fatal("does not fit")
		}
	}
}

func benchScore(b *testing.B, sc Scorer, r Request) {
	n := benchNode()
	dst := make([]int, 0, 8)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_, dst = sc.Score(n, &r, dst)
	}
}

func BenchmarkScore(b *testing.B) {
	tw := benchTarget()
	frac := Request{CPUMilli: 4000, MemMiB: 8192, GPUs: 1, Milli: 470}
	whole := Request{CPUMilli: 8000, MemMiB: 16384, GPUs: 2, Milli: 1000}
	for _, sc := range []Scorer{BestFit(), FGD(tw), Meridian(tw)} {
		b.Run(sc.Name()+"/fraction", func(b *testing.B) { benchScore(b, sc, frac) })
		b.Run(sc.Name()+"/whole", func(b *testing.B) { benchScore(b, sc, whole) })
	}
}
