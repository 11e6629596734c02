//! starhalo-mesh: placeholder until the mesh issue lands.
