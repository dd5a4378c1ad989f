#include "textflag.h"

// func prefetch(p unsafe.Pointer)
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func prefetchAt(words *uint64, at *uint64, n int)
TEXT ·prefetchAt(SB), NOSPLIT, $0-24
	MOVQ words+0(FP), AX
	MOVQ at+8(FP), BX
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JZ done
loop:
	MOVQ (BX), DX
	PREFETCHT0 (AX)(DX*8)
	ADDQ $8, BX
	DECQ CX
	JNZ loop
done:
	RET
