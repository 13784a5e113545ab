"""Static HTML reports for runs (`report`) and stores (`index`), with matplotlib plots and SVG
timelines; everything a page needs sits beside it, so a store can be copied or served as files."""
