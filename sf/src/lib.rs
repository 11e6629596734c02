//! starhalo-sf
