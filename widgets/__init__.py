"""pagedkv_widgets: the live memory visualizer (HBM bar, page table, pool map, timeline)."""
