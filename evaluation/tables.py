"""Which variants fill which table of Thomas & Kovashka (ECCV 2020); Table 3 is computed for every variant."""

TABLE_1 = ("ang_np_sym", "ours_img_nns", "ours", "pvse", "pvse_ours", "trip_np_sym", "ours_trip")
TABLE_2 = ("ours_trip", "struc_gt_text", "struc_nn_text", "struc_nn_img")
TABLE_4 = ("ours", "ours_minus_text", "ours_minus_img")
