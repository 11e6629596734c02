//! starhalo-boundary: boundary exchange for mesh blocks (in progress).
