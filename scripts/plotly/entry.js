'use strict';
// Neuron Explorer's plotly.js: the core (scatter, shapes, annotations, the cartesian axes) and the
// trace types the dashboard draws: bar, heatmap, icicle.
var Plotly = require('plotly.js/lib/core');
Plotly.register([require('plotly.js/lib/bar'), require('plotly.js/lib/heatmap'), require('plotly.js/lib/icicle')]);
module.exports = Plotly;
